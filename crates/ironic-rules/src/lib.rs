//! The inspection rules engine (API 1.96; behaviour in `docs/api.md`, Inspection rules):
//! which rules run and in which order, their conditions and their actions, on what an
//! inspection found. Upstream's behaviour is Python's, so its semantics are kept where
//! they show: templates are `str.format` (`template.rs`), values print as `str()` and
//! compare as Python does (`py.rs`), and the texts that end in `last_error` are
//! upstream's. `builtin.rs` reads `[inspection_rules] built_in_rules` (a YAML text).
//!
//! Architecture invariant: pure over the [`Subject`] (the node, the inventory, the
//! plugin data, the ports): no database, no conductor, no runtime. The one IO, the
//! `api-call` action's HTTP request and the pauses between its retries, goes through
//! the caller's [`ApiCaller`] (the conductor's HTTP client; a fake in the tests).
//! Nothing is saved here: the caller saves the node, the plugin data and the ports in
//! `changed_ports`, whatever the outcome (what a rule did before a failure stays done,
//! as upstream saves each change at once).

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ironic_model::inspection_rule::{
    ACTION_OPS, CONDITION_OPS, InspectionRule, PHASE_MAIN, check_args, is_non_empty, named_args,
    signature,
};
use ironic_model::node::JsonObject;
use ironic_model::port::Port;
use serde_json::{Map, Value};

mod actions;
pub mod builtin;
mod conditions;
mod py;
mod template;
#[cfg(test)]
mod tests;

use template::{Vars, interpolate, node_view};

/// `[inspection_rules] mask_secrets`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskSecrets {
    Always,
    Never,
    Sensitive,
}

impl MaskSecrets {
    /// The setting's value: `never`, `sensitive`, anything else `always`.
    pub fn from_setting(value: &str) -> MaskSecrets {
        match value {
            "never" => MaskSecrets::Never,
            "sensitive" => MaskSecrets::Sensitive,
            _ => MaskSecrets::Always,
        }
    }

    /// Whether secrets are masked for `rule`: always, or for rules not marked
    /// sensitive.
    fn applies(self, rule: &InspectionRule) -> bool {
        match self {
            MaskSecrets::Always => true,
            MaskSecrets::Never => false,
            MaskSecrets::Sensitive => !rule.sensitive,
        }
    }
}

/// What the rules see and change.
pub struct Subject<'a> {
    pub node: &'a mut ironic_model::Node,
    /// Read-only for rules.
    pub inventory: &'a JsonObject,
    /// Rules may change it.
    pub plugin_data: &'a mut JsonObject,
    /// The node's ports.
    pub ports: &'a mut Vec<Port>,
    /// Indexes into `ports` that actions changed (the caller saves them).
    pub changed_ports: BTreeSet<usize>,
}

/// A future the [`ApiCaller`] returns.
pub type CallFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The engine's one IO: the `api-call` action's HTTP GET and the pauses between its
/// retries. The conductor supplies its HTTP client and timer; tests a fake.
pub trait ApiCaller: Send + Sync {
    /// One attempt: the answer's status code.
    fn get<'a>(
        &'a self,
        url: &'a str,
        headers: &'a JsonObject,
        timeout: Duration,
    ) -> CallFuture<'a, Result<u16, CallError>>;

    /// Waits `d` before a retry.
    fn pause(&self, d: Duration) -> CallFuture<'_, ()>;
}

/// An `api-call` attempt that got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No connection, or no answer in time; the text is what the failure message
    /// shows after `Request to <url> failed: `.
    #[error("{0}")]
    Connection(String),
}

/// Why the rules stopped: the rule, and the text for the node's `last_error` after
/// the caller's `Failed to finish inspection: ` (upstream's wording; a sensitive rule's
/// says no more than which condition or action failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{last_error}")]
pub struct RuleFailed {
    /// The uuid of the rule that failed.
    pub rule: ironic_model::RuleUuid,
    pub last_error: String,
}

/// Why a rule stopped the run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// Upstream's own exceptions: the text as it ends in `last_error` (after the
    /// caller's `Failed to finish inspection: `).
    Final(String),
    /// Any other Python exception: its text, which the engine wraps as
    /// `Failed to apply rule <rule> to node <node>: <text>`.
    Generic(String),
}

impl Failure {
    /// Upstream's `InspectionRuleExecutionFailure`.
    fn execution(reason: impl std::fmt::Display) -> Self {
        Failure::Final(format!(
            "Inspection rule execution failed. Reason: {reason}"
        ))
    }
    /// Upstream's `RuleActionExecutionFailure`.
    fn action(reason: impl std::fmt::Display) -> Self {
        Failure::Final(format!(
            "Inspection rule action execution failed. Reason: {reason}"
        ))
    }
    /// Upstream's `RuleConditionCheckFailure`.
    fn condition(reason: impl std::fmt::Display) -> Self {
        Failure::Final(format!(
            "Inspection rule condition check failed. Reason: {reason}"
        ))
    }
}

/// Runs `rules` (database rules in id order followed by built-in rules in file order)
/// on the subject: filters DB rules to phase `main` (built-ins regardless), stable-sorts
/// by priority descending, evaluates conditions, runs actions. Err is the text for
/// `last_error` after "Failed to finish inspection: " (the caller adds that prefix).
pub async fn apply_rules(
    rules: &[InspectionRule],
    s: &mut Subject<'_>,
    mask: MaskSecrets,
    http: &dyn ApiCaller,
) -> Result<(), RuleFailed> {
    let mut order: Vec<&InspectionRule> = rules
        .iter()
        .filter(|r| r.built_in || r.phase == PHASE_MAIN)
        .collect();
    if order.is_empty() {
        tracing::debug!(node = %s.node.uuid, "no inspection rules to apply");
        return Ok(());
    }
    // Stable: ties keep the database's id order, then the file's.
    order.sort_by_key(|r| std::cmp::Reverse(r.priority));
    for rule in order {
        let masked = mask.applies(rule);
        let outcome = match rule_matches(rule, s, masked) {
            Ok(true) => {
                tracing::info!(node = %s.node.uuid, rule = %rule.uuid, "applying the actions of an inspection rule");
                run_actions(rule, s, masked, http).await
            }
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        let Err((step, failure)) = outcome else {
            continue;
        };
        let text = if rule.sensitive {
            // Its arguments may be secrets (the reason it is marked): none of them, nor
            // anything made from them, reaches `last_error`, history or the log.
            format!(
                "Failed to apply rule {} to node {}: {step} failed; the rule is sensitive, so the details are not shown.",
                rule.uuid, s.node.uuid
            )
        } else {
            match failure {
                Failure::Final(text) => text,
                Failure::Generic(detail) => format!(
                    "Failed to apply rule {} to node {}: {detail}",
                    rule.uuid, s.node.uuid
                ),
            }
        };
        tracing::error!(node = %s.node.uuid, rule = %rule.uuid, "error applying an inspection rule: {}", ironic_model::secrets::log_safe(&text));
        return Err(RuleFailed {
            rule: rule.uuid.clone(),
            last_error: text,
        });
    }
    tracing::info!(node = %s.node.uuid, "finished applying inspection rules");
    Ok(())
}

/// Where in a rule a failure happened: the condition or action by position (from 1)
/// and operator, never by argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Condition(usize, Option<&'static str>),
    Action(usize, Option<&'static str>),
}

impl Step {
    fn of(item: &JsonObject, index: usize, condition: bool) -> Step {
        let known: &[&'static str] = if condition { CONDITION_OPS } else { ACTION_OPS };
        let op = item
            .get("op")
            .and_then(Value::as_str)
            .map(|o| o.trim().trim_start_matches('!').trim())
            .and_then(|o| known.iter().find(|k| **k == o).copied());
        if condition {
            Step::Condition(index + 1, op)
        } else {
            Step::Action(index + 1, op)
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, index, op) = match self {
            Step::Condition(i, op) => ("condition", i, op),
            Step::Action(i, op) => ("action", i, op),
        };
        match op {
            Some(op) => write!(f, "{what} {index} ({op})"),
            None => write!(f, "{what} {index}"),
        }
    }
}

/// The operator of a condition or action item: upstream's `parse_inverted_operator`
/// (one leading `!`, spaces allowed) for conditions.
fn item_op(item: &JsonObject) -> Result<&str, Failure> {
    match item.get("op") {
        Some(Value::String(op)) => Ok(op.as_str()),
        Some(other) => Err(Failure::Generic(format!(
            "'{}' object has no attribute 'strip'",
            py::type_name(other)
        ))),
        None => Err(Failure::Generic("'op'".into())),
    }
}

fn parse_inverted(op: &str) -> Result<(&str, bool), Failure> {
    let op = op.trim();
    if op.matches('!').count() > 1 {
        return Err(Failure::Generic(
            "Multiple exclamation marks are not allowed. To apply the invert of an operation, simply add an exclamation mark (with an optional space) before the operator, e.g. eq - !eq.".into(),
        ));
    }
    let inverted = op.starts_with('!');
    Ok((op.trim_start_matches('!').trim(), inverted))
}

/// The arguments of an item by name, interpolated where upstream interpolates: the
/// operator's templated arguments, or every argument inside a loop.
fn process_args(
    op: &str,
    item: &JsonObject,
    vars: &Vars<'_>,
    in_loop: bool,
) -> Result<Map<String, Value>, Failure> {
    let empty = Value::Object(Map::new());
    let raw = item.get("args").unwrap_or(&empty);
    if !matches!(raw, Value::Object(_) | Value::Array(_)) {
        return Err(Failure::Generic(format!(
            "'{}' object has no attribute 'items'",
            py::type_name(raw)
        )));
    }
    if let Err(e) = check_args(op, &mut raw.clone()) {
        // A short list is upstream's validation error (shown as is); missing or
        // unexpected names are Python's TypeError at the call.
        return Err(if raw.is_array() {
            Failure::Final(e.0)
        } else {
            Failure::Generic(e.0)
        });
    }
    let mut args = named_args(op, raw);
    args.remove("plugin_data");
    let templated = signature(op).map_or(&[][..], |s| s.interpolated);
    let is_empty = op == "is-empty";
    for (name, v) in args.iter_mut() {
        if in_loop || templated.contains(&name.as_str()) {
            *v = interpolate(v, vars, in_loop, is_empty);
        }
    }
    Ok(args)
}

/// A rule's conditions, all of them (none: the rule matches).
fn rule_matches(
    rule: &InspectionRule,
    s: &Subject<'_>,
    mask: bool,
) -> Result<bool, (Step, Failure)> {
    if rule.conditions.is_empty() {
        return Ok(true);
    }
    let view = node_view(s.node);
    for (i, condition) in rule.conditions.iter().enumerate() {
        let vars = Vars {
            node: &view,
            inventory: s.inventory,
            plugin_data: s.plugin_data,
            item: None,
            mask,
            quiet: rule.sensitive,
        };
        let holds =
            condition_holds(condition, &vars).map_err(|f| (Step::of(condition, i, true), f))?;
        if !holds {
            tracing::debug!(node = %s.node.uuid, rule = %rule.uuid, op = ?condition.get("op"), "inspection rule skipped: a condition does not hold");
            return Ok(false);
        }
    }
    Ok(true)
}

/// One condition, looped or not; `multiple` combines the iterations.
fn condition_holds(condition: &JsonObject, vars: &Vars<'_>) -> Result<bool, Failure> {
    let raw = item_op(condition)?;
    let (op, inverted) = parse_inverted(raw)?;
    if !CONDITION_OPS.contains(&op) {
        return Err(Failure::Generic(format!(
            "Unsupported operator: '{op}'. Supported operators are: {}.",
            CONDITION_OPS.join(", ")
        )));
    }
    let once = |item: Option<&Value>| -> Result<bool, Failure> {
        let vars = Vars {
            node: vars.node,
            inventory: vars.inventory,
            plugin_data: vars.plugin_data,
            item,
            mask: vars.mask,
            quiet: vars.quiet,
        };
        let mut args = process_args(op, condition, &vars, item.is_some())?;
        if item.is_some() && matches!(op, "eq" | "lt" | "gt") {
            args.insert("force_strings".into(), Value::Bool(true));
        }
        let result = conditions::check(op, &args)?;
        Ok(result != inverted)
    };
    let lp = condition.get("loop").filter(|l| is_non_empty(l));
    let multiple = match condition.get("multiple") {
        None => Some("any"),
        Some(m) => m.as_str(),
    };
    match lp {
        Some(Value::Array(items)) => {
            let mut results = Vec::with_capacity(items.len());
            for item in items {
                let r = once(Some(item))?;
                match multiple {
                    Some("first") if r => return Ok(true),
                    Some("last") => results = vec![r],
                    _ => results.push(r),
                }
            }
            Ok(match multiple {
                Some("any") => results.iter().any(|r| *r),
                Some("all") => results.iter().all(|r| *r),
                _ => results.first().copied().unwrap_or(false),
            })
        }
        // An object loop runs once with the whole object as the item.
        Some(obj @ Value::Object(_)) => once(Some(obj)),
        _ => once(None),
    }
}

/// A rule's actions in order; a looped one runs once per item (once for an object).
async fn run_actions(
    rule: &InspectionRule,
    s: &mut Subject<'_>,
    mask: bool,
    http: &dyn ApiCaller,
) -> Result<(), (Step, Failure)> {
    for (i, action) in rule.actions.iter().enumerate() {
        run_one(rule, action, s, mask, http)
            .await
            .map_err(|f| (Step::of(action, i, false), f))?;
    }
    Ok(())
}

/// One action of `rule`, looped or not.
async fn run_one(
    rule: &InspectionRule,
    action: &JsonObject,
    s: &mut Subject<'_>,
    mask: bool,
    http: &dyn ApiCaller,
) -> Result<(), Failure> {
    let op = item_op(action)?;
    if !ACTION_OPS.contains(&op) {
        return Err(Failure::Generic(format!(
            "Unsupported action: '{op}'. Supported actions are: {}.",
            ACTION_OPS.join(", ")
        )));
    }
    let how = How {
        mask,
        quiet: rule.sensitive,
    };
    match action.get("loop").filter(|l| is_non_empty(l)) {
        Some(Value::Array(items)) => {
            for item in items {
                run_action(op, action, Some(item), s, how, http).await?;
            }
        }
        Some(obj @ Value::Object(_)) => run_action(op, action, Some(obj), s, how, http).await?,
        // A loop that is neither a list nor an object: upstream does nothing.
        Some(_) => {}
        None => run_action(op, action, None, s, how, http).await?,
    }
    Ok(())
}

/// How a rule's action runs: whether secrets are masked for it, and whether it is
/// quiet (a sensitive rule's: nothing of its arguments is logged).
#[derive(Debug, Clone, Copy)]
struct How {
    mask: bool,
    quiet: bool,
}

async fn run_action(
    op: &str,
    action: &JsonObject,
    item: Option<&Value>,
    s: &mut Subject<'_>,
    how: How,
    http: &dyn ApiCaller,
) -> Result<(), Failure> {
    let args = {
        let view = node_view(s.node);
        let vars = Vars {
            node: &view,
            inventory: s.inventory,
            plugin_data: s.plugin_data,
            item,
            mask: how.mask,
            quiet: how.quiet,
        };
        process_args(op, action, &vars, item.is_some())?
    };
    actions::execute(op, args, s, http, how.quiet).await
}
