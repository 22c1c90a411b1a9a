//! Clean and deploy steps as drivers declare them (reference §9.1), and the two ways a
//! list of steps to run is made from them: a user's manual list, validated against
//! everything the driver offers (§9.3), or the automated list, every step with a
//! priority above zero in priority order.

use ironic_model::node::JsonObject;
use ironic_model::patch::py_repr;
use serde_json::{Map, Value, json};

/// A stored step (or list of steps) that cannot be read back; `Display` names what is
/// wrong, and which step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredStepError {
    #[error("the list of steps is not a list")]
    NotAList,
    #[error("\"{field}\" is missing or not {expected}")]
    Field {
        field: &'static str,
        expected: &'static str,
    },
    /// The problem of the `index`th step of a list (quoted, not a source: the text says
    /// it).
    #[error("step {index}: {problem}")]
    InList {
        index: usize,
        problem: Box<StoredStepError>,
    },
}

/// One problem with steps a user, a template or a flow asked for, in upstream's words.
/// `repr` is the step as upstream's messages quote it (a Python repr).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("node does not support this {kind} step: {repr}")]
    Unsupported { kind: String, repr: String },
    #[error("{kind} step {repr} has these unexpected arguments: {}", .args.join(", "))]
    UnexpectedArgs {
        kind: String,
        repr: String,
        args: Vec<String>,
    },
    /// `args` are `name (description)`.
    #[error("{kind} step {repr} is missing these required arguments: {}", .args.join(", "))]
    MissingArgs {
        kind: String,
        repr: String,
        args: Vec<String>,
    },
    #[error(
        "deploy step {step} on interface {interface} is a core step and cannot be overridden by user steps. It may be disabled by setting the priority to 0"
    )]
    CoreStep {
        interface: &'static str,
        step: &'static str,
    },
    /// `steps` are `interface.step`.
    #[error(
        "these steps require booting a ramdisk and cannot run with disable_ramdisk: {}",
        .steps.join(", ")
    )]
    NeedsRamdisk { steps: Vec<String> },
    /// `steps` are `interface.step`.
    #[error("duplicate deploy steps: {}; a step may be given once", .steps.join(", "))]
    Duplicates { steps: Vec<String> },
}

/// Every problem found in a list of steps (nothing runs when there is one), shown
/// joined by `; ` as upstream does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepErrors(pub Vec<StepError>);

impl std::fmt::Display for StepErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StepErrors {}

impl From<StepError> for StepErrors {
    fn from(e: StepError) -> Self {
        StepErrors(vec![e])
    }
}

/// Why a deploy plan cannot be made: the user's steps (the `deploy_steps` argument) or
/// the matching templates' are invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeployPlanError {
    #[error("Validation of deploy steps from \"deploy steps\" argument failed. Errors: {0}")]
    UserSteps(StepErrors),
    #[error(
        "Validation of deploy steps from deploy templates matching this node's instance traits failed. Matching deploy templates: {}. Errors: {errors}",
        .templates.join(", ")
    )]
    TemplateSteps {
        templates: Vec<String>,
        errors: StepErrors,
    },
}

/// Invalid steps are the request's fault (400), with the message as it is.
impl From<DeployPlanError> for ironic_model::Error {
    fn from(e: DeployPlanError) -> Self {
        ironic_model::Error::Invalid(e.to_string())
    }
}

/// For callers that still carry a step error as text (the conductor's deploy plan):
/// its message.
/// One argument a step accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
}

/// A clean or deploy step an interface offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepDecl {
    pub interface: &'static str,
    pub step: &'static str,
    /// 0: runs only when asked for (manual cleaning, deploy templates).
    pub priority: u32,
    /// May be aborted while it runs; otherwise an abort waits for it to finish.
    pub abortable: bool,
    pub requires_ramdisk: bool,
    pub args: &'static [ArgInfo],
}

impl StepDecl {
    /// `argsinfo` as the API shows it: `{name: {description, required}}`, or `null`
    /// for a step without arguments.
    pub fn argsinfo(&self) -> Value {
        if self.args.is_empty() {
            return Value::Null;
        }
        let mut m = Map::new();
        for a in self.args {
            m.insert(
                a.name.into(),
                json!({"description": a.description, "required": a.required}),
            );
        }
        Value::Object(m)
    }

    /// The step as `GET .../cleaning/steps` and `driver_internal_info` show it.
    pub fn to_json(&self) -> Value {
        json!({
            "interface": self.interface,
            "step": self.step,
            "priority": self.priority,
            "abortable": self.abortable,
            "argsinfo": self.argsinfo(),
            "requires_ramdisk": self.requires_ramdisk,
        })
    }
}

/// A step a driver offers, as `GET /v1/nodes/{node}/cleaning/steps` lists it and the
/// RPC carries it (owned: it crosses the bus).
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedStep {
    pub interface: String,
    pub step: String,
    pub priority: u32,
    pub abortable: bool,
    /// `{name: {description, required}}`, or `null` without arguments.
    pub argsinfo: Value,
    /// Runs in the ramdisk (a step the agent reported): not with `disable_ramdisk`.
    pub requires_ramdisk: bool,
}

impl From<&StepDecl> for OfferedStep {
    fn from(d: &StepDecl) -> Self {
        OfferedStep {
            interface: d.interface.to_string(),
            step: d.step.to_string(),
            priority: d.priority,
            abortable: d.abortable,
            argsinfo: d.argsinfo(),
            requires_ramdisk: d.requires_ramdisk,
        }
    }
}

impl OfferedStep {
    /// A step as the ramdisk agent reports it (`get_clean_steps`, `get_deploy_steps`:
    /// `interface`, `step`, `priority`, `abortable`, `argsinfo`, …); `None` for an
    /// entry without an interface or a step name. Agent steps run in the ramdisk.
    pub fn from_agent(v: &Value) -> Option<OfferedStep> {
        let text = |k| v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
        Some(OfferedStep {
            interface: text("interface")?.to_string(),
            step: text("step")?.to_string(),
            priority: v
                .get("priority")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(0),
            abortable: v.get("abortable").and_then(Value::as_bool).unwrap_or(false),
            argsinfo: match v.get("argsinfo") {
                Some(a @ Value::Object(_)) => a.clone(),
                _ => Value::Null,
            },
            requires_ramdisk: true,
        })
    }

    /// The step as `GET .../cleaning/steps` and `driver_internal_info` show it.
    pub fn to_json(&self) -> Value {
        json!({
            "interface": self.interface,
            "step": self.step,
            "priority": self.priority,
            "abortable": self.abortable,
            "argsinfo": self.argsinfo,
            "requires_ramdisk": self.requires_ramdisk,
        })
    }
}

/// A step on offer, declared by the catalogue ([`StepDecl`]) or reported by a node's
/// ramdisk agent ([`OfferedStep::from_agent`]): what choosing and checking steps reads.
pub trait Offer {
    fn interface(&self) -> &str;
    fn step(&self) -> &str;
    fn priority(&self) -> u32;
    fn abortable(&self) -> bool;
    fn requires_ramdisk(&self) -> bool;
    /// `(name, description, required)` of each argument it accepts.
    fn arguments(&self) -> Vec<(&str, &str, bool)>;

    /// The names in `args` this step does not accept, sorted.
    fn unexpected<'a>(&self, args: &'a JsonObject) -> Vec<&'a str> {
        let known = self.arguments();
        let mut out: Vec<&str> = args
            .keys()
            .map(String::as_str)
            .filter(|k| !known.iter().any(|(n, _, _)| n == k))
            .collect();
        out.sort_unstable();
        out
    }

    /// `name (description)` of each required argument missing from `args`.
    fn missing(&self, args: &JsonObject) -> Vec<String> {
        self.arguments()
            .into_iter()
            .filter(|(n, _, required)| *required && !args.contains_key(*n))
            .map(|(n, d, _)| format!("{n} ({d})"))
            .collect()
    }

    fn is(&self, interface: &str, step: &str) -> bool {
        self.interface() == interface && self.step() == step
    }
}

impl Offer for StepDecl {
    fn interface(&self) -> &str {
        self.interface
    }
    fn step(&self) -> &str {
        self.step
    }
    fn priority(&self) -> u32 {
        self.priority
    }
    fn abortable(&self) -> bool {
        self.abortable
    }
    fn requires_ramdisk(&self) -> bool {
        self.requires_ramdisk
    }
    fn arguments(&self) -> Vec<(&str, &str, bool)> {
        self.args
            .iter()
            .map(|a| (a.name, a.description, a.required))
            .collect()
    }
}

impl Offer for OfferedStep {
    fn interface(&self) -> &str {
        &self.interface
    }
    fn step(&self) -> &str {
        &self.step
    }
    fn priority(&self) -> u32 {
        self.priority
    }
    fn abortable(&self) -> bool {
        self.abortable
    }
    fn requires_ramdisk(&self) -> bool {
        self.requires_ramdisk
    }
    fn arguments(&self) -> Vec<(&str, &str, bool)> {
        let Some(m) = self.argsinfo.as_object() else {
            return Vec::new();
        };
        m.iter()
            .map(|(name, info)| {
                let text = info
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let required = info
                    .get("required")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                (name.as_str(), text, required)
            })
            .collect()
    }
}

/// Tie-breaker between steps of equal priority, higher first.
pub fn interface_priority(interface: &str) -> u32 {
    match interface {
        "vendor" => 7,
        "power" => 6,
        "management" => 5,
        "firmware" => 4,
        "deploy" => 3,
        "bios" => 2,
        "raid" => 1,
        _ => 0,
    }
}

/// A step to run, with the arguments it gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub interface: String,
    pub step: String,
    pub args: JsonObject,
    pub priority: u32,
    pub abortable: bool,
}

impl Step {
    /// `interface.step`, as logs and messages name it.
    pub fn name(&self) -> String {
        format!("{}.{}", self.interface, self.step)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "interface": self.interface,
            "step": self.step,
            "args": self.args,
            "priority": self.priority,
            "abortable": self.abortable,
        })
    }

    /// A step as [`Step::to_json`] stored it; `Err` names what is wrong.
    pub fn from_json(v: &Value) -> Result<Step, StoredStepError> {
        let bad = |field, expected| StoredStepError::Field { field, expected };
        let text = |k: &'static str| {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(bad(k, "a string"))
        };
        Ok(Step {
            interface: text("interface")?,
            step: text("step")?,
            args: v
                .get("args")
                .and_then(Value::as_object)
                .cloned()
                .ok_or(bad("args", "an object"))?,
            priority: v
                .get("priority")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok())
                .ok_or(bad("priority", "a non-negative integer"))?,
            abortable: v
                .get("abortable")
                .and_then(Value::as_bool)
                .ok_or(bad("abortable", "a boolean"))?,
        })
    }

    /// A list of steps as stored; `Err` names the first step that cannot be read.
    pub fn list_from_json(v: Option<&Value>) -> Result<Vec<Step>, StoredStepError> {
        let Some(v) = v else {
            return Ok(Vec::new());
        };
        let list = v.as_array().ok_or(StoredStepError::NotAList)?;
        list.iter()
            .enumerate()
            .map(|(index, s)| {
                Step::from_json(s).map_err(|e| StoredStepError::InList {
                    index,
                    problem: Box::new(e),
                })
            })
            .collect()
    }
}

/// A step as a user asked for it (`clean_steps` of a manual clean).
#[derive(Debug, Clone, PartialEq)]
pub struct Requested {
    pub interface: String,
    pub step: String,
    pub args: JsonObject,
}

impl Requested {
    /// The Python repr upstream's messages use: `{'interface': 'bios', 'step': 'x',
    /// 'args': {}}`.
    pub fn repr(&self) -> String {
        py_repr(&json!({
            "interface": self.interface,
            "step": self.step,
            "args": self.args,
        }))
    }
}

/// The steps of a manual clean, in the user's order, with priority and abortability
/// from the driver. Every problem is reported at once, joined by `; ` (upstream's
/// wording); nothing runs when there is one.
pub fn validate_manual<S: Offer>(
    requested: &[Requested],
    offered: &[S],
) -> Result<Vec<Step>, StepErrors> {
    validate_requested("clean", requested, offered)
}

/// [`validate_manual`] for steps of `kind` (`clean`, `service`): every problem is named
/// with the kind.
pub fn validate_requested<S: Offer>(
    kind: &str,
    requested: &[Requested],
    offered: &[S],
) -> Result<Vec<Step>, StepErrors> {
    checked_requested(kind, requested, offered, false)
}

/// [`validate_requested`] before the node's ramdisk agent has reported its steps: a
/// step nothing offers yet is kept as asked (priority 0, not abortable), to be checked
/// once the agent has reported what it offers.
pub fn validate_requested_before_agent<S: Offer>(
    kind: &str,
    requested: &[Requested],
    offered: &[S],
) -> Result<Vec<Step>, StepErrors> {
    checked_requested(kind, requested, offered, true)
}

fn checked_requested<S: Offer>(
    kind: &str,
    requested: &[Requested],
    offered: &[S],
    unknown_allowed: bool,
) -> Result<Vec<Step>, StepErrors> {
    let mut errors = Vec::new();
    let mut out = Vec::new();
    for r in requested {
        if is_reserved(&r.step) {
            out.push(reserved(&r.interface, &r.step, &r.args, 0));
            continue;
        }
        let Some(d) = offered.iter().find(|d| d.is(&r.interface, &r.step)) else {
            if unknown_allowed {
                out.push(Step {
                    interface: r.interface.clone(),
                    step: r.step.clone(),
                    args: r.args.clone(),
                    priority: 0,
                    abortable: false,
                });
            } else {
                errors.push(StepError::Unsupported {
                    kind: kind.into(),
                    repr: r.repr(),
                });
            }
            continue;
        };
        let unexpected = d.unexpected(&r.args);
        if !unexpected.is_empty() {
            errors.push(StepError::UnexpectedArgs {
                kind: kind.into(),
                repr: r.repr(),
                args: unexpected.iter().map(|a| a.to_string()).collect(),
            });
        }
        let missing = d.missing(&r.args);
        if !missing.is_empty() {
            errors.push(StepError::MissingArgs {
                kind: kind.into(),
                repr: r.repr(),
                args: missing,
            });
        }
        out.push(Step {
            interface: r.interface.clone(),
            step: r.step.clone(),
            args: r.args.clone(),
            priority: d.priority(),
            abortable: d.abortable(),
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(StepErrors(errors))
    }
}

/// Steps the conductor runs itself, on any interface and without the driver's say
/// (upstream's flow steps): `power_on`, `power_off`, `reboot`, `hold` (the node waits
/// in `… hold` for `unhold`) and `wait` (a pause of `seconds`).
pub const RESERVED_STEPS: &[&str] = &["power_on", "power_off", "reboot", "hold", "wait"];

pub fn is_reserved(step: &str) -> bool {
    RESERVED_STEPS.contains(&step)
}

fn reserved(interface: &str, step: &str, args: &JsonObject, priority: u32) -> Step {
    Step {
        interface: interface.into(),
        step: step.into(),
        args: args.clone(),
        priority,
        abortable: true,
    }
}

/// Checks that none of `list` needs the ramdisk (`disable_ramdisk` cleaning): every
/// offender is named.
pub fn without_ramdisk<S: Offer>(list: &[Step], offered: &[S]) -> Result<(), StepErrors> {
    let needing: Vec<String> = list
        .iter()
        .filter(|s| {
            offered
                .iter()
                .any(|d| d.is(&s.interface, &s.step) && d.requires_ramdisk())
        })
        .map(Step::name)
        .collect();
    if needing.is_empty() {
        return Ok(());
    }
    Err(StepError::NeedsRamdisk { steps: needing }.into())
}

/// The steps of an automated clean: those with a priority above zero, highest first,
/// ties broken by interface.
pub fn automated<S: Offer>(offered: &[S]) -> Vec<Step> {
    let mut steps: Vec<&S> = offered.iter().filter(|d| d.priority() > 0).collect();
    steps.sort_by(|a, b| {
        (b.priority(), interface_priority(b.interface()))
            .cmp(&(a.priority(), interface_priority(a.interface())))
    });
    steps
        .into_iter()
        .map(|d| Step {
            interface: d.interface().into(),
            step: d.step().into(),
            args: JsonObject::new(),
            priority: d.priority(),
            abortable: d.abortable(),
        })
        .collect()
}

/// Every step offered with a priority of at least `min_priority`, highest first (the
/// order of `GET /v1/nodes/{node}/cleaning/steps`).
pub fn listing<S: Offer + Clone>(offered: &[S], min_priority: u32) -> Vec<S> {
    let mut steps: Vec<S> = offered
        .iter()
        .filter(|d| d.priority() >= min_priority)
        .cloned()
        .collect();
    steps.sort_by(|a, b| {
        (b.priority(), interface_priority(b.interface()), b.step()).cmp(&(
            a.priority(),
            interface_priority(a.interface()),
            a.step(),
        ))
    });
    steps
}

/// The core deploy step: a template may only disable it (priority 0).
pub const CORE_DEPLOY_STEP: (&str, &str) = ("deploy", "deploy");

/// Checks requested deploy steps (a template's or the `deploy_steps` argument's)
/// against the steps the driver offers: the checked steps, and every problem found.
fn checked_deploy_steps<S: Offer>(
    offered: &[S],
    steps: &[ironic_model::deploy_template::TemplateStep],
    errors: &mut Vec<StepError>,
    unknown_allowed: bool,
) -> Vec<Step> {
    let mut chosen = Vec::new();
    for t in steps {
        if is_reserved(&t.step) {
            chosen.push(reserved(&t.interface, &t.step, &t.args, t.priority));
            continue;
        }
        let repr = py_repr(&json!({
            "interface": t.interface, "step": t.step, "args": t.args, "priority": t.priority,
        }));
        let Some(d) = offered.iter().find(|d| d.is(&t.interface, &t.step)) else {
            if unknown_allowed {
                chosen.push(Step {
                    interface: t.interface.clone(),
                    step: t.step.clone(),
                    args: t.args.clone(),
                    priority: t.priority,
                    abortable: false,
                });
            } else {
                errors.push(StepError::Unsupported {
                    kind: "deploy".into(),
                    repr,
                });
            }
            continue;
        };
        if d.is(CORE_DEPLOY_STEP.0, CORE_DEPLOY_STEP.1) && t.priority > 0 {
            errors.push(StepError::CoreStep {
                interface: CORE_DEPLOY_STEP.0,
                step: CORE_DEPLOY_STEP.1,
            });
            continue;
        }
        let unexpected = d.unexpected(&t.args);
        if !unexpected.is_empty() {
            errors.push(StepError::UnexpectedArgs {
                kind: "deploy".into(),
                repr: repr.clone(),
                args: unexpected.iter().map(|a| a.to_string()).collect(),
            });
        }
        let missing = if t.priority > 0 {
            d.missing(&t.args)
        } else {
            Vec::new()
        };
        if !missing.is_empty() {
            errors.push(StepError::MissingArgs {
                kind: "deploy".into(),
                repr,
                args: missing,
            });
        }
        chosen.push(Step {
            interface: t.interface.clone(),
            step: t.step.clone(),
            args: t.args.clone(),
            priority: t.priority,
            abortable: d.abortable(),
        });
    }
    chosen
}

/// The deploy steps a node runs (reference §10, with two deliberate differences noted
/// in `docs/api.md`): the driver's steps with a priority above zero, where a step that a
/// matching template or the user names takes their arguments and priority (priority 0
/// disables it), plus the named steps with a priority above zero. The user's steps (the
/// `deploy_steps` argument of 1.69) take precedence over the templates' with the same
/// interface and step; the same step may come from several templates with different
/// arguments, and then runs once per template. Highest priority first, ties by
/// interface, then user steps, then in template order. `templates` are `(name, steps)`
/// in the order they apply. Every problem is reported at once.
pub fn deploy_plan<S: Offer>(
    offered: &[S],
    templates: &[(String, Vec<ironic_model::deploy_template::TemplateStep>)],
    user: &[ironic_model::deploy_template::TemplateStep],
) -> Result<Vec<Step>, DeployPlanError> {
    deploy_plan_with(offered, templates, user, false)
}

/// [`deploy_plan`] before the node's ramdisk agent has reported its deploy steps: a
/// step nothing offers yet is kept as the template or the user gave it, to be checked
/// when the plan is made again with the agent's steps.
pub fn deploy_plan_before_agent<S: Offer>(
    offered: &[S],
    templates: &[(String, Vec<ironic_model::deploy_template::TemplateStep>)],
    user: &[ironic_model::deploy_template::TemplateStep],
) -> Result<Vec<Step>, DeployPlanError> {
    deploy_plan_with(offered, templates, user, true)
}

fn deploy_plan_with<S: Offer>(
    offered: &[S],
    templates: &[(String, Vec<ironic_model::deploy_template::TemplateStep>)],
    user: &[ironic_model::deploy_template::TemplateStep],
    unknown_allowed: bool,
) -> Result<Vec<Step>, DeployPlanError> {
    let mut errors = Vec::new();
    let mut chosen = checked_deploy_steps(offered, user, &mut errors, unknown_allowed);
    let mut dups: Vec<String> = Vec::new();
    for (i, a) in user.iter().enumerate() {
        let d = format!("{}.{}", a.interface, a.step);
        if user[..i]
            .iter()
            .any(|b| b.interface == a.interface && b.step == a.step)
            && !dups.contains(&d)
        {
            dups.push(d);
        }
    }
    if !dups.is_empty() {
        errors.push(StepError::Duplicates { steps: dups });
    }
    if !errors.is_empty() {
        return Err(DeployPlanError::UserSteps(StepErrors(errors)));
    }
    for (_, steps) in templates {
        let from_template = checked_deploy_steps(offered, steps, &mut errors, unknown_allowed);
        chosen.extend(from_template.into_iter().filter(|t| {
            !user
                .iter()
                .any(|u| u.interface == t.interface && u.step == t.step)
        }));
    }
    if !errors.is_empty() {
        return Err(DeployPlanError::TemplateSteps {
            templates: templates.iter().map(|(n, _)| n.clone()).collect(),
            errors: StepErrors(errors),
        });
    }
    let named = |d: &S| chosen.iter().any(|c| d.is(&c.interface, &c.step));
    let mut plan: Vec<Step> = automated(offered)
        .into_iter()
        .filter(|s| {
            !offered
                .iter()
                .any(|d| d.is(&s.interface, &s.step) && named(d))
        })
        .collect();
    plan.extend(chosen.into_iter().filter(|s| s.priority > 0));
    // Stable: equal keys keep driver steps first, then user steps, then template order.
    plan.sort_by(|a, b| {
        (b.priority, interface_priority(&b.interface))
            .cmp(&(a.priority, interface_priority(&a.interface)))
    });
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_needing_the_ramdisk_are_refused_without_it() {
        const OFFERED: &[StepDecl] = &[
            StepDecl {
                interface: "deploy",
                step: "erase_devices",
                priority: 0,
                abortable: false,
                requires_ramdisk: true,
                args: &[],
            },
            StepDecl {
                interface: "bios",
                step: "factory_reset",
                priority: 0,
                abortable: false,
                requires_ramdisk: false,
                args: &[],
            },
        ];
        let ask = |i: &str, st: &str| Requested {
            interface: i.into(),
            step: st.into(),
            args: JsonObject::new(),
        };
        let fine = validate_manual(&[ask("bios", "factory_reset")], OFFERED).unwrap();
        assert_eq!(without_ramdisk(&fine, OFFERED), Ok(()));
        let both = validate_manual(
            &[ask("bios", "factory_reset"), ask("deploy", "erase_devices")],
            OFFERED,
        )
        .unwrap();
        let e = without_ramdisk(&both, OFFERED).unwrap_err().to_string();
        assert!(e.ends_with("disable_ramdisk: deploy.erase_devices"), "{e}");
    }

    #[test]
    fn stored_steps_round_trip_and_bad_ones_are_named() {
        let s = Step {
            interface: "deploy".into(),
            step: "sleep".into(),
            args: JsonObject::new(),
            priority: 5,
            abortable: true,
        };
        let stored = json!([s.to_json()]);
        assert_eq!(Step::list_from_json(Some(&stored)), Ok(vec![s]));
        assert_eq!(Step::list_from_json(None), Ok(vec![]));
        let bad = json!([{"interface": "deploy", "step": "sleep", "args": {}, "priority": -1, "abortable": true}]);
        let e = Step::list_from_json(Some(&bad)).unwrap_err().to_string();
        assert!(e.starts_with("step 0: \"priority\""), "{e}");
        assert!(Step::list_from_json(Some(&json!({}))).is_err());
    }

    const ARGS: &[ArgInfo] = &[
        ArgInfo {
            name: "settings",
            description: "a list of settings",
            required: true,
        },
        ArgInfo {
            name: "force",
            description: "ignore errors",
            required: false,
        },
    ];

    const OFFERED: &[StepDecl] = &[
        StepDecl {
            interface: "bios",
            step: "apply_configuration",
            priority: 0,
            abortable: false,
            requires_ramdisk: false,
            args: ARGS,
        },
        StepDecl {
            interface: "deploy",
            step: "erase_devices",
            priority: 10,
            abortable: true,
            requires_ramdisk: true,
            args: &[],
        },
        StepDecl {
            interface: "vendor",
            step: "log_passthrough",
            priority: 10,
            abortable: false,
            requires_ramdisk: false,
            args: &[],
        },
        StepDecl {
            interface: "raid",
            step: "create_configuration",
            priority: 20,
            abortable: false,
            requires_ramdisk: false,
            args: &[],
        },
    ];

    fn req(interface: &str, step: &str, args: Value) -> Requested {
        Requested {
            interface: interface.into(),
            step: step.into(),
            args: args.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn manual_steps_keep_the_users_order() {
        let steps = validate_manual(
            &[
                req("deploy", "erase_devices", json!({})),
                req("bios", "apply_configuration", json!({"settings": []})),
            ],
            OFFERED,
        )
        .unwrap();
        let names: Vec<String> = steps.iter().map(Step::name).collect();
        assert_eq!(names, ["deploy.erase_devices", "bios.apply_configuration"]);
        assert!(steps[0].abortable);
        assert_eq!(steps[0].priority, 10);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let err = validate_manual(
            &[
                req("bios", "nope", json!({})),
                req("bios", "apply_configuration", json!({"bogus": 1})),
            ],
            OFFERED,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "node does not support this clean step: {'interface': 'bios', 'step': 'nope', 'args': {}}; \
             clean step {'interface': 'bios', 'step': 'apply_configuration', 'args': {'bogus': 1}} has these unexpected arguments: bogus; \
             clean step {'interface': 'bios', 'step': 'apply_configuration', 'args': {'bogus': 1}} is missing these required arguments: settings (a list of settings)"
        );
    }

    #[test]
    fn automated_cleaning_runs_by_priority_then_interface() {
        let names: Vec<String> = automated(OFFERED).iter().map(Step::name).collect();
        assert_eq!(
            names,
            [
                "raid.create_configuration",
                "vendor.log_passthrough",
                "deploy.erase_devices"
            ]
        );
    }

    #[test]
    fn listing_filters_and_sorts() {
        let l: Vec<&str> = listing(OFFERED, 10).iter().map(|d| d.step).collect();
        assert_eq!(
            l,
            ["create_configuration", "log_passthrough", "erase_devices"]
        );
        assert_eq!(listing(OFFERED, 0).len(), 4);
        assert_eq!(OFFERED[1].argsinfo(), Value::Null);
        assert_eq!(
            OFFERED[0].argsinfo()["settings"],
            json!({"description": "a list of settings", "required": true})
        );
    }

    fn tstep(
        interface: &str,
        step: &str,
        args: Value,
        priority: u32,
    ) -> ironic_model::deploy_template::TemplateStep {
        ironic_model::deploy_template::TemplateStep {
            interface: interface.into(),
            step: step.into(),
            args: args.as_object().cloned().unwrap_or_default(),
            priority,
        }
    }

    #[test]
    fn deploy_plan_merges_templates_with_the_driver_steps() {
        let offered = crate::FAKE_DEPLOY_STEPS;
        let names = |p: &[Step]| p.iter().map(|s| (s.name(), s.priority)).collect::<Vec<_>>();
        // No template: the driver's enabled steps.
        let p = deploy_plan(offered, &[], &[]).unwrap();
        assert_eq!(names(&p), [("deploy.deploy".to_string(), 100)]);
        // A template enables a step, another runs the same step with other arguments,
        // a third disables the core step; order by priority, then template order.
        let raid = |level: &str| json!({"raid_config": {"logical_disks": [{"raid_level": level}]}});
        let t = vec![
            (
                "CUSTOM_A".to_string(),
                vec![tstep("raid", "apply_configuration", raid("1"), 150)],
            ),
            (
                "CUSTOM_B".to_string(),
                vec![
                    tstep("raid", "apply_configuration", raid("0"), 150),
                    tstep("bios", "factory_reset", json!({}), 50),
                ],
            ),
        ];
        let p = deploy_plan(offered, &t, &[]).unwrap();
        assert_eq!(
            names(&p),
            [
                ("raid.apply_configuration".to_string(), 150),
                ("raid.apply_configuration".to_string(), 150),
                ("deploy.deploy".to_string(), 100),
                ("bios.factory_reset".to_string(), 50),
            ]
        );
        assert_eq!(p[0].args, raid("1").as_object().cloned().unwrap());
        assert_eq!(p[1].args, raid("0").as_object().cloned().unwrap());
        let off = vec![(
            "CUSTOM_OFF".to_string(),
            vec![tstep("deploy", "deploy", json!({}), 0)],
        )];
        assert!(deploy_plan(offered, &off, &[]).unwrap().is_empty());
        // Errors, all at once, with the templates named.
        let bad = vec![(
            "CUSTOM_BAD".to_string(),
            vec![
                tstep("raid", "teleport", json!({}), 10),
                tstep("deploy", "deploy", json!({}), 120),
                tstep("raid", "apply_configuration", json!({"colour": "red"}), 10),
            ],
        )];
        let e = deploy_plan(offered, &bad, &[]).unwrap_err().to_string();
        assert!(e.starts_with("Validation of deploy steps from deploy templates matching this node's instance traits failed. Matching deploy templates: CUSTOM_BAD. Errors: "), "{e}");
        assert!(e.contains("node does not support this deploy step"), "{e}");
        assert!(e.contains("is a core step and cannot be overridden"), "{e}");
        assert!(e.contains("has these unexpected arguments: colour"), "{e}");
        assert!(
            e.contains("is missing these required arguments: raid_config"),
            "{e}"
        );
        // A required argument may be left out of a step that only disables it.
        let off = vec![(
            "CUSTOM_OFF".to_string(),
            vec![tstep("raid", "apply_configuration", json!({}), 0)],
        )];
        assert!(deploy_plan(offered, &off, &[]).is_ok());
    }
}
