//! Clean and deploy steps as drivers declare them (reference §9.1), and the two ways a
//! list of steps to run is made from them: a user's manual list, validated against
//! everything the driver offers (§9.3), or the automated list, every step with a
//! priority above zero in priority order.

use ironic_model::node::JsonObject;
use ironic_model::patch::py_repr;
use serde_json::{Map, Value, json};

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
    fn repr(&self) -> String {
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
pub fn validate_manual(requested: &[Requested], offered: &[StepDecl]) -> Result<Vec<Step>, String> {
    let mut errors = Vec::new();
    let mut out = Vec::new();
    for r in requested {
        let Some(d) = offered
            .iter()
            .find(|d| d.interface == r.interface && d.step == r.step)
        else {
            errors.push(format!(
                "node does not support this clean step: {}",
                r.repr()
            ));
            continue;
        };
        let mut unexpected: Vec<&str> = r
            .args
            .keys()
            .map(String::as_str)
            .filter(|k| !d.args.iter().any(|a| a.name == *k))
            .collect();
        unexpected.sort_unstable();
        if !unexpected.is_empty() {
            errors.push(format!(
                "clean step {} has these unexpected arguments: {}",
                r.repr(),
                unexpected.join(", ")
            ));
        }
        let missing: Vec<String> = d
            .args
            .iter()
            .filter(|a| a.required && !r.args.contains_key(a.name))
            .map(|a| format!("{} ({})", a.name, a.description))
            .collect();
        if !missing.is_empty() {
            errors.push(format!(
                "clean step {} is missing these required arguments: {}",
                r.repr(),
                missing.join(", ")
            ));
        }
        out.push(Step {
            interface: r.interface.clone(),
            step: r.step.clone(),
            args: r.args.clone(),
            priority: d.priority,
            abortable: d.abortable,
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors.join("; "))
    }
}

/// The steps of an automated clean: those with a priority above zero, highest first,
/// ties broken by interface.
pub fn automated(offered: &[StepDecl]) -> Vec<Step> {
    let mut steps: Vec<&StepDecl> = offered.iter().filter(|d| d.priority > 0).collect();
    steps.sort_by(|a, b| {
        (b.priority, interface_priority(b.interface))
            .cmp(&(a.priority, interface_priority(a.interface)))
    });
    steps
        .into_iter()
        .map(|d| Step {
            interface: d.interface.into(),
            step: d.step.into(),
            args: JsonObject::new(),
            priority: d.priority,
            abortable: d.abortable,
        })
        .collect()
}

/// Every step offered with a priority of at least `min_priority`, highest first (the
/// order of `GET /v1/nodes/{node}/cleaning/steps`).
pub fn listing(offered: &[StepDecl], min_priority: u32) -> Vec<StepDecl> {
    let mut steps: Vec<StepDecl> = offered
        .iter()
        .filter(|d| d.priority >= min_priority)
        .copied()
        .collect();
    steps.sort_by(|a, b| {
        (b.priority, interface_priority(b.interface), b.step).cmp(&(
            a.priority,
            interface_priority(a.interface),
            a.step,
        ))
    });
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

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
        .unwrap_err();
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
}
