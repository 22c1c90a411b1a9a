//! The engine against the spec's cases (§4, 32–39) and each operator, action and
//! templating rule.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ironic_model::inspection_rule::{Origin, validate_doc};
use ironic_model::port::PortSpec;
use ironic_model::{Node, NodeUuid, Version};
use serde_json::json;

use super::py::{py_float, py_repr, py_str};
use super::template::{self, FmtError};
use super::*;

fn obj(v: Value) -> JsonObject {
    match v {
        Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

fn inventory() -> JsonObject {
    obj(json!({
        "system_vendor": {"manufacturer": "Fake Inc.", "serial_number": "SN-40"},
        "cpu": {"count": 4, "architecture": "x86_64"},
        "bmc_address": "192.0.2.240",
        "bmc_password": "s",
        "interfaces": [
            {"name": "eth0", "mac_address": "52:54:00:00:40:01", "ipv4_address": "192.0.2.40"},
            {"name": "eth1", "mac_address": "52:54:00:00:40:02", "ipv4_address": "198.51.100.7"}
        ]
    }))
}

const NODE_UUID: &str = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";
const PORT_UUID: &str = "7c1a0f2e-8b43-4c6a-9d1e-2f3a4b5c6d7e";

fn node() -> Node {
    let mut n = Node::blank(
        NodeUuid::parse(NODE_UUID).unwrap(),
        "fake-hardware".into(),
        Version::MAX,
    );
    n.name = Some("insp-node".into());
    n.properties.insert("cpu_arch".into(), json!("x86_64"));
    n
}

fn port(mac: &str, uuid: &str) -> Port {
    let spec = PortSpec::from_doc(
        &obj(json!({"address": mac, "node_uuid": NODE_UUID})),
        Version::MAX,
    )
    .unwrap();
    Port::new(ironic_model::PortUuid::parse(uuid).unwrap(), spec)
}

/// A rule from a body as the API takes it (built-in origin: any priority).
fn rule(body: Value) -> InspectionRule {
    let doc = validate_doc(&body, Origin::BuiltIn).unwrap();
    InspectionRule {
        id: 0,
        uuid: doc.uuid.clone().unwrap_or_else(|| {
            ironic_model::RuleUuid::from_db("0a0a0a0a-0000-4000-8000-000000000001".into())
        }),
        description: doc.description,
        priority: doc.priority,
        sensitive: doc.sensitive,
        phase: doc.phase,
        conditions: doc.conditions,
        actions: doc.actions,
        built_in: false,
        created_at: chrono::Utc::now(),
        updated_at: None,
    }
}

/// A fake HTTP client answering from a script (the last answer repeats).
struct FakeHttp {
    script: Mutex<VecDeque<Result<u16, String>>>,
    calls: AtomicUsize,
    seen: Mutex<Vec<(String, JsonObject, Duration)>>,
}

impl FakeHttp {
    fn new(script: Vec<Result<u16, String>>) -> Self {
        FakeHttp {
            script: Mutex::new(script.into()),
            calls: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
        }
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl ApiCaller for FakeHttp {
    fn get<'a>(
        &'a self,
        url: &'a str,
        headers: &'a JsonObject,
        timeout: Duration,
    ) -> CallFuture<'a, Result<u16, CallError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen
            .lock()
            .unwrap()
            .push((url.to_string(), headers.clone(), timeout));
        let mut script = self.script.lock().unwrap();
        let answer = if script.len() > 1 {
            script.pop_front().unwrap()
        } else {
            script.front().cloned().unwrap_or(Ok(200))
        };
        Box::pin(async move { answer.map_err(CallError::Connection) })
    }

    /// No wait: the tests' backoff factors are 0, and a pause is not what they check.
    fn pause(&self, _d: Duration) -> CallFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// What a run works on.
struct Env {
    node: Node,
    inventory: JsonObject,
    plugin_data: JsonObject,
    ports: Vec<Port>,
    changed_ports: BTreeSet<usize>,
}

impl Env {
    fn new() -> Self {
        Env {
            node: node(),
            inventory: inventory(),
            plugin_data: obj(json!({"macs": ["52:54:00:00:40:01"], "logs": "x"})),
            ports: vec![
                port("52:54:00:00:40:01", PORT_UUID),
                port("52:54:00:00:40:02", "5d0a9d3c-5b8a-4fd1-9a7e-3f07a9b1f0aa"),
            ],
            changed_ports: BTreeSet::new(),
        }
    }

    async fn run_with(
        &mut self,
        rules: &[InspectionRule],
        mask: MaskSecrets,
        http: &dyn ApiCaller,
    ) -> Result<(), String> {
        let mut s = Subject {
            node: &mut self.node,
            inventory: &self.inventory,
            plugin_data: &mut self.plugin_data,
            ports: &mut self.ports,
            changed_ports: BTreeSet::new(),
        };
        let out = apply_rules(rules, &mut s, mask, http)
            .await
            .map_err(|e| e.last_error);
        self.changed_ports = s.changed_ports;
        out
    }

    async fn run(&mut self, rules: &[InspectionRule]) -> Result<(), String> {
        self.run_with(rules, MaskSecrets::Always, &FakeHttp::new(vec![Ok(200)]))
            .await
    }

    /// Runs one rule of `actions` (and `conditions`).
    async fn act(&mut self, conditions: Value, actions: Value) -> Result<(), String> {
        let r = rule(json!({"conditions": conditions, "actions": actions}));
        self.run(&[r]).await
    }
}

const RULE: &str = "0a0a0a0a-0000-4000-8000-000000000001";

fn generic(detail: &str) -> String {
    format!("Failed to apply rule {RULE} to node {NODE_UUID}: {detail}")
}

fn action_failure(detail: &str) -> String {
    format!("Inspection rule action execution failed. Reason: {detail}")
}

/// Whether one condition holds (the rule's action then adds a trait).
async fn holds(condition: Value) -> Result<bool, String> {
    let mut env = Env::new();
    env.act(
        json!([condition]),
        json!([{"op": "add-trait", "args": {"name": "CUSTOM_HIT"}}]),
    )
    .await?;
    Ok(env.node.traits.iter().any(|t| t == "CUSTOM_HIT"))
}

async fn holds_ok(condition: Value) -> bool {
    holds(condition).await.unwrap()
}

fn vars_for<'a>(view: &'a JsonObject, inv: &'a JsonObject, pd: &'a JsonObject) -> Vars<'a> {
    Vars {
        node: view,
        inventory: inv,
        plugin_data: pd,
        item: None,
        mask: true,
        quiet: false,
    }
}

fn fmt(template: &str) -> Result<String, FmtError> {
    let (n, inv, pd) = (node(), inventory(), obj(json!({"a": {"b": [1, 2.5]}})));
    let view = node_view(&n);
    template::format(template, &vars_for(&view, &inv, &pd))
}

// ---------------------------------------------------------------------------------
// §4 cases 32–39.

fn example_rules() -> Vec<InspectionRule> {
    let mut tag = rule(json!({
        "uuid": "12121212-3434-4565-8787-909090909090",
        "description": "tag fake machines",
        "priority": 50,
        "phase": "main",
        "conditions": [{"op": "contains", "args": {
            "value": "{inventory[system_vendor][manufacturer]}", "regex": "Fake"}}],
        "actions": [
            {"op": "add-trait", "args": {"name": "CUSTOM_INSPECTED"}},
            {"op": "set-attribute", "args": {
                "path": "/extra/rack", "value": "r-{inventory[system_vendor][serial_number]}"}},
            {"op": "set-capability", "args": {"name": "boot_mode", "value": "uefi"}}
        ]
    }));
    tag.id = 1;
    let mut log = rule(json!({"description": "no conditions",
        "actions": [{"op": "log", "args": {"msg": "inspected {node.uuid}"}}]}));
    log.id = 2;
    let mut minimal = rule(json!({"conditions": [],
        "actions": [{"op": "log", "args": {"msg": "inspected {node.uuid}"}}]}));
    minimal.id = 3;
    let mut secret = rule(json!({
        "description": "set BMC password", "sensitive": true, "priority": 10,
        "conditions": [{"op": "is-true", "args": {"value": "{node.auto_discovered}"}}],
        "actions": [{"op": "set-attribute", "args": {
            "path": "/driver_info/ipmi_password", "value": "secret"}}]
    }));
    secret.id = 4;
    vec![tag, log, minimal, secret]
}

#[tokio::test]
async fn case_32_the_example_rules_tag_the_node() {
    let mut env = Env::new();
    env.run(&example_rules()).await.unwrap();
    assert_eq!(env.node.extra["rack"], json!("r-SN-40"));
    assert_eq!(env.node.properties["capabilities"], json!("boot_mode:uefi"));
    assert_eq!(env.node.properties["cpu_arch"], json!("x86_64"));
    assert_eq!(env.node.traits, vec!["CUSTOM_INSPECTED".to_string()]);
    // `{node.auto_discovered}` is "False": the sensitive rule did not apply.
    assert!(!env.node.driver_info.contains_key("ipmi_password"));
    assert!(env.changed_ports.is_empty());

    let mut discovered = Env::new();
    discovered
        .node
        .driver_internal_info
        .insert("auto_discovered".into(), json!(true));
    discovered.run(&example_rules()).await.unwrap();
    assert_eq!(
        discovered.node.driver_info["ipmi_password"],
        json!("secret")
    );
}

#[tokio::test]
async fn case_33_fail_keeps_its_message_literal() {
    let mut env = Env::new();
    let err = env
        .act(
            json!([]),
            json!([{"op": "fail", "args": {"msg": "refusing {node.name}"}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        "Failed to inspect hardware. Reason: refusing {node.name}"
    );
    // Inside a loop every argument is formatted.
    let err = env
        .act(
            json!([]),
            json!([{"op": "fail", "args": {"msg": "refusing {node.name} {item}"}, "loop": [7]}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        "Failed to inspect hardware. Reason: refusing insp-node 7"
    );
}

#[tokio::test]
async fn case_34_comparing_a_formatted_number_is_a_type_error() {
    let err = holds(json!({"op": "gt", "args": {"values": ["{inventory[cpu][count]}", 2]}}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        generic("'>' not supported between instances of 'str' and 'int'")
    );
    // eq of the string with the number: simply false.
    assert!(
        !holds_ok(json!({"op": "eq", "args": {"values": ["{inventory[cpu][count]}", 4]}})).await
    );
    assert!(
        holds_ok(json!({"op": "eq", "args": {"values": ["{inventory[cpu][count]}", "4"]}})).await
    );
}

#[tokio::test]
async fn case_35_a_missing_key_is_empty_but_not_none() {
    assert!(holds_ok(json!({"op": "is-empty", "args": {"value": "{inventory[nope]}"}})).await);
    assert!(!holds_ok(json!({"op": "!is-empty", "args": {"value": "{inventory[nope]}"}})).await);
    assert!(!holds_ok(json!({"op": "is-none", "args": {"value": "{inventory[nope]}"}})).await);
    assert!(
        !holds_ok(json!({"op": "is-empty", "args": {"value": "{inventory[bmc_address]}"}})).await
    );
    // An unknown variable is a missing key too; a bad index is not.
    assert!(holds_ok(json!({"op": "is-empty", "args": {"value": "{nothing}"}})).await);
    assert!(
        !holds_ok(json!({"op": "is-empty", "args": {"value": "{inventory[interfaces][9]}"}})).await
    );
}

#[tokio::test]
async fn case_36_loops_combine_by_multiple() {
    let cond = |multiple: &str| json!({"op": "eq", "args": {"values": [1, "{item}"]}, "loop": [1, 2, 3], "multiple": multiple});
    assert!(holds_ok(cond("any")).await);
    assert!(!holds_ok(cond("all")).await);
    assert!(holds_ok(cond("first")).await);
    assert!(!holds_ok(cond("last")).await);
    // Without `multiple`: any.
    assert!(holds_ok(json!({"op": "eq", "args": {"values": [1, "{item}"]}, "loop": [3, 1]})).await);
    // `first` that never holds reads the first iteration.
    assert!(!holds_ok(json!({"op": "eq", "args": {"values": [9, "{item}"]}, "loop": [1, 2], "multiple": "first"})).await);
    // Negation per iteration: all items differ from 9.
    assert!(holds_ok(json!({"op": "!eq", "args": {"values": [9, "{item}"]}, "loop": [1, 2], "multiple": "all"})).await);
    // An object loop runs once with the object.
    assert!(holds_ok(json!({"op": "eq", "args": {"values": ["{item[a]}", "x"]}, "loop": {"a": "x"}, "multiple": "all"})).await);
    // An empty loop is no loop: no forced strings.
    assert!(!holds_ok(json!({"op": "eq", "args": {"values": [1, "1"]}, "loop": []})).await);
}

#[tokio::test]
async fn case_37_loop_items_are_formatted_twice() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([{"op": "set-attribute",
                "args": {"path": "{item[p]}", "value": "{item[v]}"},
                "loop": [{"p": "/extra/a", "v": "{inventory[bmc_address]}"}]}]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.extra["a"], json!("192.0.2.240"));
    // Object arguments: values twice, keys once; list elements once.
    env.act(
        json!([]),
        json!([{"op": "set-attribute",
                "args": {"path": "/extra/b", "value": {"k": "{item}", "l": ["{item}"]}},
                "loop": ["{node.name}"]}]),
    )
    .await
    .unwrap();
    assert_eq!(
        env.node.extra["b"],
        json!({"k": "insp-node", "l": ["{node.name}"]})
    );
}

#[tokio::test]
async fn case_38_secrets_are_masked_as_configured() {
    let set = |sensitive: bool| {
        rule(
            json!({"sensitive": sensitive, "actions": [{"op": "set-attribute",
            "args": {"path": "/extra/pw", "value": "{inventory[bmc_password]}"}}]}),
        )
    };
    let http = FakeHttp::new(vec![Ok(200)]);
    for (mask, sensitive, expected) in [
        (MaskSecrets::Always, false, "***"),
        (MaskSecrets::Always, true, "***"),
        (MaskSecrets::Never, false, "s"),
        (MaskSecrets::Sensitive, true, "s"),
        (MaskSecrets::Sensitive, false, "***"),
    ] {
        let mut env = Env::new();
        env.run_with(&[set(sensitive)], mask, &http).await.unwrap();
        assert_eq!(
            env.node.extra["pw"],
            json!(expected),
            "{mask:?} {sensitive}"
        );
    }
    // At any depth, in whole objects rendered too; node secrets always (below).
    let mut env = Env::new();
    env.inventory
        .insert("bmc".into(), json!({"password": "p", "user": "u"}));
    env.plugin_data
        .insert("creds".into(), json!([{"auth_token": "t"}]));
    env.node.driver_info.insert("password".into(), json!("n"));
    env.act(
        json!([]),
        json!([
            {"op": "set-attribute", "args": {"path": "/extra/bmc", "value": "{inventory[bmc]}"}},
            {"op": "set-attribute", "args": {"path": "/extra/creds", "value": "{plugin_data[creds]}"}},
            {"op": "set-attribute", "args": {"path": "/extra/node", "value": "{node.driver_info[password]}"}},
            {"op": "set-plugin-data", "args": {"path": "password", "value": "new"}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(
        env.node.extra["bmc"],
        json!("{'password': '***', 'user': 'u'}")
    );
    assert_eq!(env.node.extra["creds"], json!("[{'auth_token': '***'}]"));
    assert_eq!(env.node.extra["node"], json!("******"));
    // Writes go to the real data.
    assert_eq!(env.plugin_data["password"], json!("new"));
}

#[tokio::test]
async fn case_39_capabilities_append_and_unset() {
    let mut env = Env::new();
    env.node
        .properties
        .insert("capabilities".into(), json!("boot_mode:bios"));
    env.act(
        json!([]),
        json!([{"op": "set-capability", "args": {"name": "boot_mode", "value": "uefi"}}]),
    )
    .await
    .unwrap();
    assert_eq!(
        env.node.properties["capabilities"],
        json!("boot_mode:bios,boot_mode:uefi")
    );
    env.act(
        json!([]),
        json!([{"op": "unset-capability", "args": {"name": "boot_mode"}}]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.properties["capabilities"], json!(""));
    // Other capabilities stay; an absent key becomes "".
    env.node
        .properties
        .insert("capabilities".into(), json!("a:1,boot_mode:x,b:2"));
    env.act(
        json!([]),
        json!([{"op": "unset-capability", "args": {"name": "boot_mode"}}]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.properties["capabilities"], json!("a:1,b:2"));
    env.node.properties.remove("capabilities");
    env.act(
        json!([]),
        json!([{"op": "unset-capability", "args": {"name": "x"}}]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.properties["capabilities"], json!(""));
    let err = env
        .act(
            json!([]),
            json!([{"op": "set-capability", "args": {"name": "n", "value": 5}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to set capability n: sequence item 1: expected str instance, int found"
        )
    );
}

// ---------------------------------------------------------------------------------
// Ordering and failures.

#[tokio::test]
async fn rules_run_by_priority_then_in_given_order() {
    let step = |name: &str, priority: i64| {
        let mut r = rule(
            json!({"priority": priority, "actions": [{"op": "extend-attribute",
            "args": {"path": "/extra/order", "value": name}}]}),
        );
        r.uuid = ironic_model::RuleUuid::from_db(format!("{name}-rule"));
        r
    };
    let mut early = step("early", 99);
    early.phase = "early".into();
    let mut builtin_early = step("builtin-early", 1);
    builtin_early.phase = "early".into();
    builtin_early.built_in = true;
    let mut builtin = step("builtin", 0);
    builtin.built_in = true;
    let rules = vec![
        step("db0", 0),
        step("db10", 10),
        early,
        step("db0b", 0),
        step("db50", 50),
        builtin,
        builtin_early,
    ];
    let mut env = Env::new();
    env.run(&rules).await.unwrap();
    assert_eq!(
        env.node.extra["order"],
        json!(["db50", "db10", "builtin-early", "db0", "db0b", "builtin"])
    );
}

#[tokio::test]
async fn a_failure_stops_the_remaining_actions_and_rules() {
    let first = rule(json!({"priority": 10, "actions": [
        {"op": "add-trait", "args": {"name": "CUSTOM_A"}},
        {"op": "fail", "args": {"msg": "stop"}},
        {"op": "add-trait", "args": {"name": "CUSTOM_B"}}
    ]}));
    let second = rule(json!({"actions": [{"op": "add-trait", "args": {"name": "CUSTOM_C"}}]}));
    let mut env = Env::new();
    let err = env.run(&[second, first]).await.unwrap_err();
    assert_eq!(err, "Failed to inspect hardware. Reason: stop");
    // What was done before stays done.
    assert_eq!(env.node.traits, vec!["CUSTOM_A".to_string()]);
}

#[tokio::test]
async fn conditions_are_anded_and_stop_at_the_first_false() {
    // The second condition would fail with a type error if it ran.
    assert!(!holds_ok(json!({"op": "eq", "args": {"values": [1, 2]}})).await);
    let mut env = Env::new();
    env.act(
        json!([
            {"op": "eq", "args": {"values": [1, 2]}},
            {"op": "lt", "args": {"values": [null, 1]}}
        ]),
        json!([{"op": "add-trait", "args": {"name": "CUSTOM_X"}}]),
    )
    .await
    .unwrap();
    assert!(env.node.traits.is_empty());
    env.act(
        json!([
            {"op": "eq", "args": {"values": [1, 1]}},
            {"op": "is-true", "args": {"value": true}}
        ]),
        json!([{"op": "add-trait", "args": {"name": "CUSTOM_X"}}]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.traits, vec!["CUSTOM_X".to_string()]);
}

#[tokio::test]
async fn no_rules_change_nothing() {
    let mut env = Env::new();
    let before = env.node.clone();
    env.run(&[]).await.unwrap();
    assert_eq!(env.node, before);
}

// ---------------------------------------------------------------------------------
// Operators.

#[tokio::test]
async fn eq_lt_gt() {
    assert!(holds_ok(json!({"op": "eq", "args": {"values": [1, 1.0, true]}})).await);
    assert!(!holds_ok(json!({"op": "eq", "args": {"values": [1, 2]}})).await);
    assert!(holds_ok(json!({"op": "eq", "args": {"values": [{"a": [1]}, {"a": [1.0]}]}})).await);
    assert!(holds_ok(json!({"op": "eq", "args": {"values": [5]}})).await);
    assert!(
        holds_ok(json!({"op": "eq", "args": {"values": [1, "1"], "force_strings": true}})).await
    );
    assert!(!holds_ok(json!({"op": "!eq", "args": {"values": [3, 3]}})).await);
    assert!(holds_ok(json!({"op": "lt", "args": {"values": [1, 2.5, 3]}})).await);
    assert!(!holds_ok(json!({"op": "lt", "args": {"values": [1, 3, 2]}})).await);
    assert!(holds_ok(json!({"op": "lt", "args": {"values": ["a", "b"]}})).await);
    assert!(holds_ok(json!({"op": "lt", "args": {"values": [[1, 2], [1, 3], [1, 3, 0]]}})).await);
    assert!(holds_ok(json!({"op": "gt", "args": {"values": [3, 2, false]}})).await);
    assert!(!holds_ok(json!({"op": "gt", "args": {"values": [2, 2]}})).await);
    // Python stops at the first pair that does not hold.
    assert!(!holds_ok(json!({"op": "lt", "args": {"values": [2, 1, "x"]}})).await);
    assert_eq!(
        holds(json!({"op": "lt", "args": {"values": [null, 1]}})).await,
        Err(generic(
            "'<' not supported between instances of 'NoneType' and 'int'"
        ))
    );
    assert_eq!(
        holds(json!({"op": "gt", "args": {"values": [[1, "a"], [1, 2]]}})).await,
        Err(generic(
            "'>' not supported between instances of 'str' and 'int'"
        ))
    );
    assert_eq!(
        holds(json!({"op": "lt", "args": {"values": [{}, {}]}})).await,
        Err(generic(
            "'<' not supported between instances of 'dict' and 'dict'"
        ))
    );
    assert_eq!(
        holds(json!({"op": "eq", "args": {"values": "abc"}})).await,
        Err("Inspection rule condition check failed. Reason: Failed to check condition: 'eq' on values: abc: Expected list for 'values', got: str".into())
    );
    assert_eq!(
        holds(json!({"op": "gt", "args": {"values": {"a": 1}}})).await,
        Err("Inspection rule condition check failed. Reason: Failed to check condition: 'gt' on values: {'a': 1}: Expected list for 'values', got: dict".into())
    );
}

#[tokio::test]
async fn is_empty_is_none_is_true_is_false() {
    for v in [json!(""), json!(null), json!([]), json!({}), json!("None")] {
        assert!(
            holds_ok(json!({"op": "is-empty", "args": {"value": v}})).await,
            "{v}"
        );
    }
    for v in [json!(0), json!(false), json!("x"), json!([0])] {
        assert!(
            !holds_ok(json!({"op": "is-empty", "args": {"value": v}})).await,
            "{v}"
        );
    }
    assert!(holds_ok(json!({"op": "is-none", "args": {"value": null}})).await);
    assert!(!holds_ok(json!({"op": "is-none", "args": {"value": "None"}})).await);
    assert!(holds_ok(json!({"op": "!is-none", "args": {"value": 0}})).await);
    for v in [
        json!(true),
        json!(1),
        json!(0.5),
        json!("Yes"),
        json!("TRUE"),
    ] {
        assert!(
            holds_ok(json!({"op": "is-true", "args": {"value": v}})).await,
            "{v}"
        );
    }
    for v in [
        json!(false),
        json!(0),
        json!("1"),
        json!(null),
        json!([1]),
        json!("on"),
    ] {
        assert!(
            !holds_ok(json!({"op": "is-true", "args": {"value": v}})).await,
            "{v}"
        );
    }
    for v in [
        json!(false),
        json!(0),
        json!(0.0),
        json!("No"),
        json!("false"),
        json!(null),
    ] {
        assert!(
            holds_ok(json!({"op": "is-false", "args": {"value": v}})).await,
            "{v}"
        );
    }
    for v in [json!(true), json!(2), json!("0"), json!([]), json!({})] {
        assert!(
            !holds_ok(json!({"op": "is-false", "args": {"value": v}})).await,
            "{v}"
        );
    }
    // Templates render as strings: `False` is a false word.
    assert!(holds_ok(json!({"op": "is-false", "args": {"value": "{node.auto_discovered}"}})).await);
}

#[tokio::test]
async fn in_net() {
    let c = |a: &str, s: &str| json!({"op": "in-net", "args": {"address": a, "subnet": s}});
    assert!(holds_ok(c("{inventory[bmc_address]}", "192.0.2.0/24")).await);
    assert!(holds_ok(c("192.0.2.5", "192.0.2.77/24")).await);
    assert!(holds_ok(c("192.0.2.5", "192.0.2.0/255.255.255.0")).await);
    assert!(holds_ok(c("192.0.2.5", "192.0.2.5")).await);
    assert!(!holds_ok(c("192.0.2.6", "192.0.2.5")).await);
    assert!(holds_ok(c("10.1.2.3", "0.0.0.0/0")).await);
    assert!(!holds_ok(c("198.51.100.1", "192.0.2.0/24")).await);
    assert!(holds_ok(c("2001:db8::1", "2001:db8::/32")).await);
    assert!(!holds_ok(c("192.0.2.1", "::/0")).await);
    assert!(
        !holds_ok(c(
            "{inventory[interfaces][1][ipv4_address]}",
            "{inventory[bmc_address]}/8"
        ))
        .await
    );
    assert!(
        holds_ok(c(
            "{inventory[interfaces][0][ipv4_address]}",
            "{inventory[bmc_address]}/24"
        ))
        .await
    );
    assert_eq!(
        holds(c("192.0.2.1", "foo/24")).await,
        Err(
            "Inspection rule execution failed. Reason: invalid value: invalid IPNetwork foo/24"
                .into()
        )
    );
    assert_eq!(
        holds(c("192.0.2.1", "192.0.2.0/33")).await,
        Err("Inspection rule execution failed. Reason: invalid value: invalid IPNetwork 192.0.2.0/33".into())
    );
    assert_eq!(
        holds(c("bar", "192.0.2.0/24")).await,
        Err(generic("failed to detect a valid IP address from 'bar'"))
    );
}

#[tokio::test]
async fn matches_and_contains() {
    let m = |v: &str, r: &str| json!({"op": "matches", "args": {"value": v, "regex": r}});
    let c = |v: Value, r: &str| json!({"op": "contains", "args": {"value": v, "regex": r}});
    let maker = "{inventory[system_vendor][manufacturer]}";
    assert!(holds_ok(m(maker, "Fake.*")).await);
    assert!(!holds_ok(m(maker, "Fake")).await);
    assert!(holds_ok(m(maker, "(?i)fake inc\\.")).await);
    // Upstream appends `$` to the text: `Fake|Nope$` matches a prefix `Fake`.
    assert!(holds_ok(m(maker, "Fake|Nope")).await);
    assert!(holds_ok(m(maker, "Nope|Fake.*")).await);
    assert!(holds_ok(m("abc", "a.c$")).await);
    assert!(!holds_ok(m("xabc", "abc")).await);
    assert!(holds_ok(c(json!(maker), "Inc")).await);
    assert!(!holds_ok(c(json!(maker), "^Inc")).await);
    assert!(holds_ok(c(json!(["a", 1]), "\\['a', 1\\]")).await);
    assert!(holds_ok(c(json!(""), "")).await);
    let err = holds(m("x", "(")).await.unwrap_err();
    assert!(
        err.starts_with("Inspection rule execution failed. Reason: invalid regular expression: "),
        "{err}"
    );
    assert_eq!(
        holds(m("x", "")).await,
        Err(generic("string index out of range"))
    );
    let err = holds(c(json!("x"), "[")).await.unwrap_err();
    assert!(err.contains("invalid regular expression"), "{err}");
}

#[tokio::test]
async fn one_of() {
    let c = |v: Value, vs: Value| json!({"op": "one-of", "args": {"value": v, "values": vs}});
    assert!(holds_ok(c(json!("x"), json!(["x", "y"]))).await);
    assert!(!holds_ok(c(json!("z"), json!(["x", "y"]))).await);
    assert!(holds_ok(c(json!(1), json!([1.0]))).await);
    assert!(holds_ok(c(json!("Inc"), json!("Fake Inc."))).await);
    assert!(holds_ok(c(json!("a"), json!({"a": 1}))).await);
    assert!(!holds_ok(json!({"op": "one-of", "args": {"value": "x"}})).await);
    // `value` is templated, `values` not.
    assert!(
        holds_ok(c(
            json!("{inventory[cpu][architecture]}"),
            json!(["x86_64", "aarch64"])
        ))
        .await
    );
    assert!(
        !holds_ok(c(
            json!("x86_64"),
            json!(["{inventory[cpu][architecture]}"])
        ))
        .await
    );
    assert_eq!(
        holds(c(json!(1), json!(5))).await,
        Err(generic("argument of type 'int' is not iterable"))
    );
    assert_eq!(
        holds(c(json!(1), json!("abc"))).await,
        Err(generic(
            "'in <string>' requires string as left operand, not int"
        ))
    );
}

// ---------------------------------------------------------------------------------
// Templating.

#[test]
fn templates_format_as_python() {
    assert_eq!(fmt("{{x}} {inventory[cpu][count]}}}"), Ok("{x} 4}".into()));
    assert_eq!(fmt("{inventory[interfaces][0][name]}"), Ok("eth0".into()));
    assert_eq!(fmt("{inventory[bmc_address][0]}"), Ok("1".into()));
    assert_eq!(
        fmt("{node.name}/{node.driver}"),
        Ok("insp-node/fake-hardware".into())
    );
    assert_eq!(fmt("{node.uuid}"), Ok(NODE_UUID.into()));
    assert_eq!(fmt("{node[name]}"), Ok("insp-node".into()));
    assert_eq!(fmt("{node.properties[cpu_arch]}"), Ok("x86_64".into()));
    assert_eq!(fmt("{node.auto_discovered}"), Ok("False".into()));
    assert_eq!(fmt("{node.description}"), Ok("None".into()));
    assert_eq!(fmt("{node.provision_state}"), Ok("enroll".into()));
    assert_eq!(fmt("{node.maintenance}"), Ok("False".into()));
    assert_eq!(
        fmt("{inventory[cpu]}"),
        Ok("{'count': 4, 'architecture': 'x86_64'}".into())
    );
    assert_eq!(fmt("{plugin_data[a][b]}"), Ok("[1, 2.5]".into()));
    assert_eq!(fmt("{plugin_data[a][b][1]}"), Ok("2.5".into()));
    assert_eq!(
        fmt("{inventory[cpu][architecture]!r}"),
        Ok("'x86_64'".into())
    );
    assert_eq!(fmt("{inventory[bmc_password]}"), Ok("***".into()));
}

#[test]
fn templates_that_fail() {
    let key = |t: &str| fmt(t).map_err(|e| e.key);
    assert_eq!(key("{inventory[nope]}"), Err(true));
    assert_eq!(key("{nope}"), Err(true));
    assert_eq!(key("{item}"), Err(true));
    assert_eq!(key("{inventory[cpu][0]}"), Err(true));
    assert_eq!(key("{inventory[interfaces][5]}"), Err(false));
    assert_eq!(key("{inventory[interfaces][x]}"), Err(false));
    assert_eq!(key("{inventory.cpu}"), Err(false));
    assert_eq!(key("{node.nope}"), Err(false));
    assert_eq!(key("{node.properties.cpu_arch}"), Err(false));
    assert_eq!(key("{inventory[cpu][count][0]}"), Err(false));
    assert_eq!(key("x}"), Err(false));
    assert_eq!(key("x{"), Err(false));
    assert_eq!(key("{inventory[cpu}"), Err(false));
    assert_eq!(key("{}"), Err(false));
    assert_eq!(key("{0}"), Err(false));
    assert_eq!(key("{node.name:>8}"), Err(false));
    assert_eq!(key("{node.name!x}"), Err(false));
    assert_eq!(key("{inventory[cpu]x}"), Err(false));
    assert_eq!(
        fmt("x}").map_err(|e| e.msg),
        Err("Single '}' encountered in format string".into())
    );
}

#[tokio::test]
async fn a_failed_template_is_kept_unchanged() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([
            {"op": "set-attribute", "args": {"path": "/extra/a", "value": "{{x}} {inventory[nope]}"}},
            {"op": "set-attribute", "args": {"path": "/extra/b", "value": "{{x}} x}"}},
            {"op": "set-attribute", "args": {"path": "/extra/c", "value": "{{x}} {node.name}"}},
            {"op": "set-attribute", "args": {"path": "/extra/d", "value": [1, "{node.name}", {"{node.name}": "{node.driver}"}]}},
            {"op": "set-attribute", "args": {"path": "/extra/e", "value": 2.0}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.extra["a"], json!("{{x}} {inventory[nope]}"));
    assert_eq!(env.node.extra["b"], json!("{{x}} x}"));
    assert_eq!(env.node.extra["c"], json!("{x} insp-node"));
    assert_eq!(
        env.node.extra["d"],
        json!([1, "insp-node", {"insp-node": "fake-hardware"}])
    );
    assert_eq!(env.node.extra["e"], json!(2.0));
}

#[test]
fn python_str_and_repr() {
    assert_eq!(py_float(2.0), "2.0");
    assert_eq!(py_float(0.3), "0.3");
    assert_eq!(py_float(1e16), "1e+16");
    assert_eq!(py_float(1e15), "1000000000000000.0");
    assert_eq!(py_float(1.5e-5), "1.5e-05");
    assert_eq!(py_float(0.0001), "0.0001");
    assert_eq!(py_float(-12345.678), "-12345.678");
    assert_eq!(py_float(1.2345678901234568e17), "1.2345678901234568e+17");
    assert_eq!(py_float(0.1 + 0.2), "0.30000000000000004");
    assert_eq!(
        py_str(&json!({"a": [true, null, 1.0, "it's"], "b": "x\n"}), false),
        "{'a': [True, None, 1.0, \"it's\"], 'b': 'x\\n'}"
    );
    assert_eq!(py_str(&json!("raw 'x'"), false), "raw 'x'");
    assert_eq!(py_repr(&json!("a'b\"c\\"), false), "'a\\'b\"c\\\\'");
    assert_eq!(py_repr(&json!("\u{a0}\u{7}"), false), "'\\xa0\\x07'");
    assert_eq!(
        py_repr(&json!({"password": 1, "x": {"auth_token": [1]}}), true),
        "{'password': '***', 'x': {'auth_token': '***'}}"
    );
}

// ---------------------------------------------------------------------------------
// Node attribute actions.

#[tokio::test]
async fn set_attribute_paths_and_errors() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([
            {"op": "set-attribute", "args": {"path": "extra.rack", "value": "r1"}},
            {"op": "set-attribute", "args": {"path": "/extra/a.b", "value": 1}},
            {"op": "set-attribute", "args": {"path": "/extra/deep/er/key/", "value": true}},
            {"op": "set-attribute", "args": {"path": "description", "value": "d"}},
            {"op": "set-attribute", "args": {"path": "/driver_internal_info/x", "value": 2}},
            {"op": "set-attribute", "args": {"path": "no_such_field", "value": 2}},
            {"op": "set-attribute", "args": {"path": "maintenance", "value": "true"}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.extra["rack"], json!("r1"));
    assert_eq!(env.node.extra["a.b"], json!(1));
    assert_eq!(env.node.extra["deep"], json!({"er": {"key": true}}));
    assert_eq!(env.node.description.as_deref(), Some("d"));
    assert_eq!(env.node.driver_internal_info["x"], json!(2));
    assert!(env.node.maintenance);

    // Numbers and booleans set on text fields read as Python prints them.
    env.act(
        json!([]),
        json!([
            {"op": "set-attribute", "args": {"path": "description", "value": 5}},
            {"op": "set-attribute", "args": {"path": "owner", "value": true}},
            {"op": "set-port-attribute", "args": {"port_id": PORT_UUID, "path": "description", "value": 2.0}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.description.as_deref(), Some("5"));
    assert_eq!(env.node.owner.as_deref(), Some("True"));
    assert_eq!(env.ports[0].description.as_deref(), Some("2.0"));

    let fail = |path: &str, value: Value| json!([{"op": "set-attribute", "args": {"path": path, "value": value}}]);
    let cases = [
        (
            "provision_state",
            json!("active"),
            "Failed to set attribute provision_state with value active: attribute is read-only",
        ),
        (
            "/traits/x",
            json!(1),
            "Failed to set attribute /traits/x with value 1: attribute is read-only",
        ),
        (
            "/nope/x",
            json!(1),
            "Failed to set attribute /nope/x with value 1: 'Node' object has no attribute 'nope'",
        ),
        (
            "/name/x/y",
            json!(1),
            "Failed to set attribute /name/x/y with value 1: 'str' object has no attribute 'setdefault'",
        ),
        (
            "/name/x",
            json!(1),
            "Failed to set attribute /name/x with value 1: 'str' object does not support item assignment",
        ),
        (
            "/description/x",
            json!(1),
            "Failed to set attribute /description/x with value 1: 'NoneType' object does not support item assignment",
        ),
        (
            "extra",
            json!([1]),
            "Failed to set attribute extra with value [1]: Schema error for patch: [1] is not of type 'object', 'null'",
        ),
        (
            "name",
            json!("bad name!"),
            "Failed to set attribute name with value bad name!: Node 1be26c0b-03f2-4d2e-ae87-c02d7f33c123: Cannot change name to invalid name 'bad name!'",
        ),
        (
            "driver_internal_info",
            json!(3),
            "Failed to set attribute driver_internal_info with value 3: Schema error for patch: 3 is not of type 'object', 'null'",
        ),
        (
            "maintenance",
            json!(5),
            "Failed to set attribute maintenance with value 5: Schema error for patch: 5 is not of type 'string', 'boolean'",
        ),
        (
            "description",
            json!({"a": 1}),
            "Failed to set attribute description with value {'a': 1}: Schema error for patch: {'a': 1} is not of type 'string', 'null'",
        ),
    ];
    for (path, value, expected) in cases {
        let mut env = Env::new();
        let before = env.node.clone();
        let err = env.act(json!([]), fail(path, value)).await.unwrap_err();
        assert_eq!(err, action_failure(expected));
        assert_eq!(env.node, before, "{path}: a failed action changes nothing");
    }
    let mut env = Env::new();
    let err = env
        .act(
            json!([]),
            json!([{"op": "set-attribute", "args": {"path": 5, "value": 1}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to set attribute 5 with value 1: argument of type 'int' is not iterable"
        )
    );
}

#[tokio::test]
async fn extend_attribute() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([
            {"op": "extend-attribute", "args": {"path": "/extra/tags", "value": "a"}},
            {"op": "extend-attribute", "args": {"path": "/extra/tags", "value": "a", "unique": true}},
            {"op": "extend-attribute", "args": {"path": "/extra/tags", "value": "b", "unique": true}},
            {"op": "extend-attribute", "args": {"path": "/extra/tags", "value": "a"}},
            {"op": "extend-attribute", "args": {"path": "/extra/n/list", "value": 1}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.extra["tags"], json!(["a", "b", "a"]));
    assert_eq!(env.node.extra["n"], json!({"list": [1]}));
    env.node.extra.insert("rack".into(), json!("r1"));
    let err = env
        .act(
            json!([]),
            json!([{"op": "extend-attribute", "args": {"path": "/extra/rack", "value": "x"}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to extend attribute /extra/rack: Inspection rule action execution failed. Reason: Cannot extend non-list attribute /extra/rack with value x"
        )
    );
    let err = env
        .act(
            json!([]),
            json!([{"op": "extend-attribute", "args": {"path": "extra", "value": "x"}}]),
        )
        .await
        .unwrap_err();
    assert!(
        err.ends_with("Cannot extend non-list attribute extra with value x"),
        "{err}"
    );
    let err = env
        .act(
            json!([]),
            json!([{"op": "extend-attribute", "args": {"path": "/extra/rack/x", "value": "x"}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to extend attribute /extra/rack/x: 'str' object has no attribute 'setdefault'"
        )
    );
}

#[tokio::test]
async fn del_attribute() {
    let mut env = Env::new();
    env.node.extra.insert("rack".into(), json!("r1"));
    env.node.extra.insert("a".into(), json!({"b": 1, "c": 2}));
    env.node.description = Some("d".into());
    env.act(
        json!([]),
        json!([
            {"op": "del-attribute", "args": {"path": "/extra/rack"}},
            {"op": "del-attribute", "args": {"path": "extra.a.b"}},
            {"op": "del-attribute", "args": {"path": "description"}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.extra, obj(json!({"a": {"c": 2}})));
    assert_eq!(env.node.description, None);
    let cases = [
        (
            "/extra/nope",
            "Failed to delete attribute at /extra/nope: 'nope'",
        ),
        (
            "/extra/x/y",
            "Failed to delete attribute at /extra/x/y: 'x'",
        ),
        (
            "/extra/a/c/d",
            "Failed to delete attribute at /extra/a/c/d: 'int' object does not support item deletion",
        ),
        (
            "driver",
            "Failed to delete attribute at driver: Schema error for patch: 'driver' is a required property",
        ),
        (
            "uuid",
            "Failed to delete attribute at uuid: attribute is read-only",
        ),
    ];
    for (path, expected) in cases {
        let err = env
            .act(
                json!([]),
                json!([{"op": "del-attribute", "args": {"path": path}}]),
            )
            .await
            .unwrap_err();
        assert_eq!(err, action_failure(expected));
    }
}

#[tokio::test]
async fn traits() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([
            {"op": "add-trait", "args": {"name": "CUSTOM_A"}},
            {"op": "add-trait", "args": {"name": "CUSTOM_A"}},
            {"op": "add-trait", "args": {"name": "CUSTOM_B"}},
            {"op": "remove-trait", "args": {"name": "CUSTOM_A"}},
            {"op": "remove-trait", "args": {"name": "CUSTOM_NEVER"}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.traits, vec!["CUSTOM_B".to_string()]);
    env.node.traits = (0..50).map(|i| format!("CUSTOM_{i}")).collect();
    env.node.id = ironic_model::NodeId(7);
    // Present already: fine at the limit.
    env.act(
        json!([]),
        json!([{"op": "add-trait", "args": {"name": "CUSTOM_3"}}]),
    )
    .await
    .unwrap();
    let err = env
        .act(
            json!([]),
            json!([{"op": "add-trait", "args": {"name": "CUSTOM_NEW"}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to add new trait CUSTOM_NEW: Could not modify traits for node 7 as it would exceed the maximum number of traits per node (51 vs. 50)"
        )
    );
    assert_eq!(env.node.traits.len(), 50);
}

#[tokio::test]
async fn plugin_data_actions() {
    let mut env = Env::new();
    env.plugin_data
        .insert("one".into(), json!({"only": {"k": 1}, "other": 2}));
    env.plugin_data.insert("flag".into(), json!(""));
    env.act(
        json!([]),
        json!([
            {"op": "set-plugin-data", "args": {"path": "a.b.c", "value": "{inventory[cpu][count]}"}},
            {"op": "set-plugin-data", "args": {"path": "a/b", "value": 1}},
            {"op": "extend-plugin-data", "args": {"path": "macs", "value": "52:54:00:00:40:01", "unique": true}},
            {"op": "extend-plugin-data", "args": {"path": "macs", "value": "x"}},
            {"op": "extend-plugin-data", "args": {"path": "new.list", "value": 1}},
            {"op": "extend-plugin-data", "args": {"path": "flag", "value": 1}},
            {"op": "unset-plugin-data", "args": {"path": "one.only.k"}},
            {"op": "unset-plugin-data", "args": {"path": "missing.path"}},
            {"op": "unset-plugin-data", "args": {"path": "logs"}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.plugin_data["a"], json!({"b": {"c": "4"}}));
    assert_eq!(env.plugin_data["a/b"], json!(1));
    assert_eq!(env.plugin_data["macs"], json!(["52:54:00:00:40:01", "x"]));
    assert_eq!(env.plugin_data["new"], json!({"list": [1]}));
    assert_eq!(env.plugin_data["flag"], json!([1]));
    // The last key of `only` took `only` with it.
    assert_eq!(env.plugin_data["one"], json!({"other": 2}));
    assert!(!env.plugin_data.contains_key("logs"));

    // Alone at the top level: removed (ours).
    let mut env = Env::new();
    env.plugin_data = obj(json!({"solo": 1}));
    env.act(
        json!([]),
        json!([{"op": "unset-plugin-data", "args": {"path": "solo"}}]),
    )
    .await
    .unwrap();
    assert!(env.plugin_data.is_empty());

    let mut env = Env::new();
    let err = env
        .act(
            json!([]),
            json!([{"op": "extend-plugin-data", "args": {"path": "logs", "value": 1}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to extend plugin data at logs: 'str' object has no attribute 'append'"
        )
    );
    let err = env
        .act(
            json!([]),
            json!([{"op": "set-plugin-data", "args": {"path": "logs.x.y", "value": 1}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to set plugin data at logs.x.y: 'str' object has no attribute 'setdefault'"
        )
    );
    let err = env
        .act(
            json!([]),
            json!([{"op": "set-plugin-data", "args": {"path": "macs.x", "value": 1}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        action_failure(
            "Failed to set plugin data at macs.x: list indices must be integers or slices, not str"
        )
    );
}

#[tokio::test]
async fn log_levels() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([
            {"op": "log", "args": {"msg": "x {node.name}"}},
            {"op": "log", "args": {"msg": "x", "level": "WARNING"}},
            {"op": "log", "args": ["x", "critical"]}
        ]),
    )
    .await
    .unwrap();
    let err = env
        .act(
            json!([]),
            json!([{"op": "log", "args": {"msg": "x", "level": "Loud"}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        "Inspection rule execution failed. Reason: Invalid log level: loud. Choose from {'debug', 'info', 'warning', 'error', 'critical'}"
    );
    let err = env
        .act(
            json!([]),
            json!([{"op": "log", "args": {"msg": "x", "level": 3}}]),
        )
        .await
        .unwrap_err();
    assert_eq!(err, generic("'int' object has no attribute 'lower'"));
}

#[tokio::test]
async fn list_arguments() {
    let mut env = Env::new();
    env.act(
        json!([{"op": "eq", "args": [[1, 1]]}]),
        json!([
            {"op": "set-attribute", "args": ["/extra/x", "{node.name}"]},
            {"op": "set-plugin-data", "args": ["p", 1]}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.extra["x"], json!("insp-node"));
    assert_eq!(env.plugin_data["p"], json!(1));
    // Validation would refuse a short list; a stored one fails as upstream says.
    let mut r = rule(json!({"actions": [{"op": "log", "args": ["x"]}]}));
    r.actions[0].insert("args".into(), json!(["/extra/x"]));
    r.actions[0].insert("op".into(), json!("set-attribute"));
    let err = env.run(&[r]).await.unwrap_err();
    assert_eq!(err, "Not enough arguments provided. Missing: value");
}

#[tokio::test]
async fn action_loops_run_once_per_item() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([
            {"op": "add-trait", "args": {"name": "CUSTOM_{item}"}, "loop": ["A", "B"]},
            {"op": "set-attribute", "args": {"path": "/extra/{item[k]}", "value": "{item[v]}"},
             "loop": {"k": "key", "v": "{node.name}"}}
        ]),
    )
    .await
    .unwrap();
    assert_eq!(
        env.node.traits,
        vec!["CUSTOM_A".to_string(), "CUSTOM_B".to_string()]
    );
    assert_eq!(env.node.extra["key"], json!("insp-node"));
}

// ---------------------------------------------------------------------------------
// Ports.

#[tokio::test]
async fn port_attributes_by_uuid_or_mac() {
    let mut env = Env::new();
    env.act(
        json!([]),
        json!([
            {"op": "set-port-attribute", "args": {"port_id": PORT_UUID, "path": "pxe_enabled", "value": false}},
            {"op": "set-port-attribute", "args": {"port_id": "52:54:00:00:40:02", "path": "extra/x", "value": "{inventory[bmc_address]}"}},
            {"op": "extend-port-attribute", "args": {"port_id": "52:54:00:00:40:02", "path": "extra/l", "value": 1, "unique": true}},
            {"op": "extend-port-attribute", "args": {"port_id": "52:54:00:00:40:02", "path": "extra/l", "value": 1, "unique": true}},
            {"op": "set-port-attribute", "args": {"port_id": PORT_UUID, "path": "/local_link_connection",
                "value": {"switch_id": "0a:1b:2c:3d:4e:5f", "port_id": "Ethernet1/1"}}},
            {"op": "set-port-attribute", "args": {"port_id": PORT_UUID, "path": "physical_network", "value": "physnet1"}}
        ]),
    )
    .await
    .unwrap();
    assert!(!env.ports[0].pxe_enabled);
    assert_eq!(env.ports[0].physical_network.as_deref(), Some("physnet1"));
    assert_eq!(
        env.ports[0].local_link_connection["port_id"],
        json!("Ethernet1/1")
    );
    assert_eq!(env.ports[1].extra["x"], json!("192.0.2.240"));
    assert_eq!(env.ports[1].extra["l"], json!([1]));
    assert_eq!(env.changed_ports, BTreeSet::from([0, 1]));

    env.act(
        json!([]),
        json!([{"op": "del-port-attribute", "args": {"port_id": "52:54:00:00:40:02", "path": "extra.x"}}]),
    )
    .await
    .unwrap();
    assert!(!env.ports[1].extra.contains_key("x"));
    assert_eq!(env.changed_ports, BTreeSet::from([1]));
}

#[tokio::test]
async fn port_attribute_errors() {
    let cases = [
        (
            json!({"op": "set-port-attribute", "args": {"port_id": "nope", "path": "extra/x", "value": 1}}),
            "Port nope could not be found.".to_string(),
        ),
        (
            json!({"op": "del-port-attribute", "args": {"port_id": PORT_UUID, "path": "extra/missing"}}),
            action_failure(&format!(
                "Failed to delete attribute extra/missing for port {PORT_UUID}: 'missing'"
            )),
        ),
        (
            json!({"op": "extend-port-attribute", "args": {"port_id": PORT_UUID, "path": "address", "value": 1}}),
            action_failure(&format!(
                "Failed to extend attribute address for port {PORT_UUID}: Inspection rule action execution failed. Reason: Cannot extend non-list attribute address with  value 1"
            )),
        ),
        (
            json!({"op": "set-port-attribute", "args": {"port_id": PORT_UUID, "path": "uuid", "value": "x"}}),
            action_failure(&format!(
                "Failed to set attribute uuid for port {PORT_UUID}: attribute is read-only"
            )),
        ),
        (
            json!({"op": "set-port-attribute", "args": {"port_id": PORT_UUID, "path": "address", "value": "zz"}}),
            action_failure(&format!(
                "Failed to set attribute address for port {PORT_UUID}: Expected valid MAC address for address: zz"
            )),
        ),
    ];
    for (action, expected) in cases {
        let mut env = Env::new();
        let before = env.ports.clone();
        let err = env.act(json!([]), json!([action])).await.unwrap_err();
        assert_eq!(err, expected);
        assert_eq!(env.ports, before);
        assert!(env.changed_ports.is_empty());
    }
}

// ---------------------------------------------------------------------------------
// api-call.

fn api_rule(args: Value) -> InspectionRule {
    rule(json!({"actions": [{"op": "api-call", "args": args}]}))
}

#[tokio::test]
async fn api_call_retries_then_succeeds() {
    let http = FakeHttp::new(vec![Ok(503), Err("connection refused".into()), Ok(204)]);
    let mut env = Env::new();
    env.run_with(
        &[api_rule(
            json!({"url": "http://hook/{node.uuid}", "headers": {"X-A": "1"},
            "retries": 3, "backoff_factor": 0, "timeout": 2.5}),
        )],
        MaskSecrets::Always,
        &http,
    )
    .await
    .unwrap();
    assert_eq!(http.calls(), 3);
    let seen = http.seen.lock().unwrap();
    assert_eq!(seen[0].0, format!("http://hook/{NODE_UUID}"));
    assert_eq!(seen[0].1, obj(json!({"X-A": "1"})));
    assert_eq!(seen[0].2, Duration::from_millis(2500));
}

#[tokio::test]
async fn api_call_gives_up() {
    let http = FakeHttp::new(vec![Ok(500)]);
    let mut env = Env::new();
    let err = env
        .run_with(
            &[api_rule(
                json!({"url": "http://hook/", "retries": 2, "backoff_factor": 0}),
            )],
            MaskSecrets::Always,
            &http,
        )
        .await
        .unwrap_err();
    assert_eq!(http.calls(), 3);
    assert_eq!(
        err,
        action_failure(
            "Request to http://hook/ failed: 500 Server Error: Internal Server Error for url: http://hook/"
        )
    );

    // Not a retried status: one attempt.
    let http = FakeHttp::new(vec![Ok(404)]);
    let err = env
        .run_with(
            &[api_rule(
                json!({"url": "http://hook/", "backoff_factor": 0}),
            )],
            MaskSecrets::Always,
            &http,
        )
        .await
        .unwrap_err();
    assert_eq!(http.calls(), 1);
    assert_eq!(
        err,
        action_failure(
            "Request to http://hook/ failed: 404 Client Error: Not Found for url: http://hook/"
        )
    );

    let http = FakeHttp::new(vec![Err("connection refused".into())]);
    let err = env
        .run_with(
            &[api_rule(json!({"url": "http://hook/", "retries": "0"}))],
            MaskSecrets::Always,
            &http,
        )
        .await
        .unwrap_err();
    assert_eq!(http.calls(), 1);
    assert_eq!(
        err,
        action_failure("Request to http://hook/ failed: connection refused")
    );
}

/// A failure shows the URL as scheme, host, port and path: no query, fragment or user
/// information, where a webhook's token usually is.
#[tokio::test]
async fn api_call_failures_show_no_query_or_credentials() {
    let mut env = Env::new();
    for answer in [Ok(404), Ok(503), Err("connection refused".into())] {
        let http = FakeHttp::new(vec![answer]);
        let err = env
            .run_with(
                &[api_rule(json!({
                    "url": "https://bot:pw-S3CRET@hook.example:8443/notify/{node.uuid}?token=S3CRET#S3CRET",
                    "retries": 1, "backoff_factor": 0}))],
                MaskSecrets::Always,
                &http,
            )
            .await
            .unwrap_err();
        assert!(
            err.contains(&format!(
                "Request to https://hook.example:8443/notify/{NODE_UUID} failed: "
            )),
            "{err}"
        );
        assert!(!err.contains("S3CRET") && !err.contains("bot"), "{err}");
        // The request itself went to the whole URL.
        let seen = http.seen.lock().unwrap();
        assert!(seen[0].0.ends_with("?token=S3CRET#S3CRET"), "{}", seen[0].0);
    }
}

#[tokio::test]
async fn api_call_parameters() {
    let http = FakeHttp::new(vec![Ok(200)]);
    let mut env = Env::new();
    let cases = [
        (
            json!({"url": "u", "timeout": 0}),
            action_failure("Invalid parameter: timeout must be greater than zero"),
        ),
        (
            json!({"url": "u", "timeout": "abc"}),
            action_failure("Invalid parameter: could not convert string to float: 'abc'"),
        ),
        (
            json!({"url": "u", "retries": "1.5"}),
            action_failure("Invalid parameter: invalid literal for int() with base 10: '1.5'"),
        ),
        (
            json!({"url": "u", "timeout": null}),
            generic("float() argument must be a string or a real number, not 'NoneType'"),
        ),
    ];
    for (args, expected) in cases {
        let err = env
            .run_with(&[api_rule(args)], MaskSecrets::Always, &http)
            .await
            .unwrap_err();
        assert_eq!(err, expected);
    }
    assert_eq!(http.calls(), 0);
    // Defaults: a 5 s timeout; strings convert.
    env.run_with(
        &[api_rule(json!({"url": "u", "timeout": " 7 "}))],
        MaskSecrets::Always,
        &http,
    )
    .await
    .unwrap();
    env.run_with(&[api_rule(json!({"url": "u"}))], MaskSecrets::Always, &http)
        .await
        .unwrap();
    let seen = http.seen.lock().unwrap();
    assert_eq!(seen[0].2, Duration::from_secs(7));
    assert_eq!(seen[1].2, Duration::from_secs(5));
}

#[test]
fn apply_rules_is_send() {
    fn send<T: Send>(_: T) {}
    let mut env = Env::new();
    let http = FakeHttp::new(vec![Ok(200)]);
    let mut s = Subject {
        node: &mut env.node,
        inventory: &env.inventory,
        plugin_data: &mut env.plugin_data,
        ports: &mut env.ports,
        changed_ports: BTreeSet::new(),
    };
    send(apply_rules(&[], &mut s, MaskSecrets::Always, &http));
}

// ---------------------------------------------------------------------------------
// Sensitive rules.

/// A sensitive rule's failure says which rule and which of its conditions or actions
/// failed, and nothing of its arguments or of what they made (the text goes to
/// `last_error`, node history and the log); the same rule not marked sensitive says all.
#[tokio::test]
async fn a_sensitive_rules_failure_shows_none_of_its_values() {
    let secret = "S3CRET";
    let cases = [
        (
            json!([]),
            json!([{"op": "add-trait", "args": {"name": "CUSTOM_A"}},
                   {"op": "set-attribute", "args": {"path": "/uuid", "value": format!("v-{secret}")}}]),
            "action 2 (set-attribute)",
        ),
        (
            json!([]),
            json!([{"op": "set-attribute", "args": {"path": format!("/{secret}/x"), "value": 1}}]),
            "action 1 (set-attribute)",
        ),
        (
            json!([]),
            json!([{"op": "extend-attribute", "args": {"path": "/extra", "value": secret}}]),
            "action 1 (extend-attribute)",
        ),
        (
            json!([]),
            json!([{"op": "fail", "args": {"msg": format!("token {secret}")}}]),
            "action 1 (fail)",
        ),
        (
            json!([]),
            json!([{"op": "api-call", "args": {"url": format!("http://hook/{secret}/x"),
                    "retries": 0}}]),
            "action 1 (api-call)",
        ),
        (
            json!([]),
            json!([{"op": "set-port-attribute", "args": {"port_id": PORT_UUID,
                    "path": "/address", "value": secret}}]),
            "action 1 (set-port-attribute)",
        ),
        (
            json!([{"op": "matches", "args": {"value": secret, "regex": format!("({secret}")}}]),
            json!([{"op": "add-trait", "args": {"name": "CUSTOM_A"}}]),
            "condition 1 (matches)",
        ),
    ];
    for (conditions, actions, step) in cases {
        for sensitive in [false, true] {
            let r = rule(json!({"sensitive": sensitive, "conditions": conditions,
                                "actions": actions}));
            let mut env = Env::new();
            let http = FakeHttp::new(vec![Ok(500)]);
            let err = env
                .run_with(&[r], MaskSecrets::Always, &http)
                .await
                .unwrap_err();
            if sensitive {
                assert_eq!(
                    err,
                    format!(
                        "Failed to apply rule {RULE} to node {NODE_UUID}: {step} failed; the rule is sensitive, so the details are not shown."
                    )
                );
            } else {
                // The same rule not marked sensitive: the details (here the value, but
                // for the regular expression's complaint).
                assert!(!err.contains("not shown"), "{step}: {err}");
                assert!(
                    err.contains(secret) || step.starts_with("condition"),
                    "{step}: {err}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// What templates may read of the node, and what a ramdisk may make them read.

/// The node a template sees has its secrets masked, whatever `mask_secrets` says:
/// `driver_info` passwords (at any depth), the agent token in `driver_internal_info`,
/// secret patterns in text. Writes still go to the real node.
#[tokio::test]
async fn templates_see_the_node_with_its_secrets_masked() {
    let http = FakeHttp::new(vec![Ok(200)]);
    for mask in [
        MaskSecrets::Always,
        MaskSecrets::Never,
        MaskSecrets::Sensitive,
    ] {
        for sensitive in [false, true] {
            let mut env = Env::new();
            env.node.driver_info = obj(json!({"ipmi_address": "192.0.2.1",
                "ipmi_password": "bmc-S3CRET", "bmcs": [{"redfish_password": "S3CRET-2"}]}));
            env.node.driver_internal_info =
                obj(json!({"agent_secret_token": "tok-S3CRET", "agent_url": "http://a"}));
            env.node.extra = obj(json!({"note": "password=S3CRET-3"}));
            let copy = |path: &str, value: &str| json!({"op": "set-attribute", "args": {"path": path, "value": value}});
            let r = rule(json!({"sensitive": sensitive, "actions": [
                copy("/extra/pw", "{node.driver_info[ipmi_password]}"),
                copy("/extra/di", "{node.driver_info}"),
                copy("/extra/token", "{node.driver_internal_info[agent_secret_token]}"),
                copy("/extra/dii", "{node.driver_internal_info!r}"),
                copy("/extra/note", "{node.extra[note]}"),
                copy("/extra/addr", "{node.driver_info[ipmi_address]}"),
                {"op": "set-attribute", "args": {"path": "/driver_info/ipmi_username",
                                                 "value": "admin"}},
            ]}));
            env.run_with(&[r], mask, &http).await.unwrap();
            let extra = Value::Object(env.node.extra.clone()).to_string();
            assert!(!extra.contains("S3CRET"), "{mask:?} {sensitive}: {extra}");
            assert_eq!(env.node.extra["pw"], json!("******"));
            assert_eq!(env.node.extra["token"], json!("******"));
            assert_eq!(env.node.extra["addr"], json!("192.0.2.1"));
            // The real node keeps its secrets.
            assert_eq!(env.node.driver_info["ipmi_password"], json!("bmc-S3CRET"));
            assert_eq!(env.node.driver_info["ipmi_username"], json!("admin"));
            assert_eq!(
                env.node.driver_internal_info["agent_secret_token"],
                json!("tok-S3CRET")
            );
        }
    }
}

/// In a loop, an argument is formatted twice (a loop item may be a template), but text
/// that the first pass took from the inventory, the plugin data or the node is written
/// as it is: a ramdisk that sends a template gets it back, not evaluated.
#[tokio::test]
async fn a_loop_does_not_evaluate_templates_the_ramdisk_sent() {
    let mut env = Env::new();
    env.node.driver_info = obj(json!({"ipmi_password": "bmc-S3CRET", "ipmi_address": "x"}));
    let sent = "{node.driver_info[ipmi_address]} {node.name} {{x}}";
    env.inventory.insert(
        "system_vendor".into(),
        json!({"manufacturer": sent, "product_name": "a { b }} c"}),
    );
    env.plugin_data
        .insert("note".into(), json!("{inventory[bmc_address]}"));
    env.node.extra.insert("tmpl".into(), json!("{node.uuid}"));
    env.act(
        json!([]),
        json!([
            {"op": "set-attribute", "loop": [1, 2], "args": {"path": "/extra/v{item}",
             "value": "vendor {inventory[system_vendor][manufacturer]}"}},
            {"op": "set-attribute", "loop": ["a"], "args": {"path": "/extra/product",
             "value": "{inventory[system_vendor][product_name]} {item}"}},
            {"op": "set-attribute", "loop": ["a"], "args": {"path": "/extra/pd",
             "value": "{plugin_data[note]} {node.extra[tmpl]} {item}"}},
            // A loop item that is a template is still evaluated (upstream's).
            {"op": "set-attribute", "loop": ["{node.name}"], "args": {"path": "/extra/it",
             "value": "{item}"}},
        ]),
    )
    .await
    .unwrap();
    assert_eq!(env.node.extra["v1"], json!(format!("vendor {sent}")));
    assert_eq!(env.node.extra["v2"], json!(format!("vendor {sent}")));
    assert_eq!(env.node.extra["product"], json!("a { b }} c a"));
    assert_eq!(
        env.node.extra["pd"],
        json!("{inventory[bmc_address]} {node.uuid} a")
    );
    assert_eq!(env.node.extra["it"], json!("insp-node"));
}
