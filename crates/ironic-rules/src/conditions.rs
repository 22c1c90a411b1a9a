//! Condition operators (spec §3.7), on arguments already interpolated.

use std::net::IpAddr;

use regex::Regex;
use serde_json::{Map, Value};

use super::Failure;
use super::py::{self, Cmp, py_str, type_name};

/// Evaluates the plain operator `op` (without `!`) on its named arguments.
pub(super) fn check(op: &str, args: &Map<String, Value>) -> Result<bool, Failure> {
    let arg = |name: &str| args.get(name).unwrap_or(&Value::Null);
    match op {
        "eq" | "lt" | "gt" => compare(op, arg("values"), py::truthy(arg("force_strings"))),
        "is-empty" => Ok(matches!(
            py_str(arg("value"), false).as_str(),
            "" | "None" | "[]" | "{}"
        )),
        "in-net" => in_net(arg("address"), arg("subnet")),
        "matches" => matches(arg("value"), arg("regex")),
        "contains" => contains(arg("value"), arg("regex")),
        "one-of" => py::py_contains(arg("values"), arg("value")).map_err(|e| Failure::Generic(e.0)),
        "is-none" => Ok(arg("value").is_null()),
        "is-true" => Ok(match arg("value") {
            Value::Bool(b) => *b,
            Value::Number(_) => py::truthy(arg("value")),
            Value::String(s) => matches!(s.to_lowercase().as_str(), "yes" | "true"),
            _ => false,
        }),
        "is-false" => Ok(match arg("value") {
            Value::Bool(b) => !*b,
            Value::Number(_) => !py::truthy(arg("value")),
            Value::String(s) => matches!(s.to_lowercase().as_str(), "no" | "false"),
            Value::Null => true,
            _ => false,
        }),
        other => Err(Failure::Generic(format!("Unsupported operator '{other}'."))),
    }
}

/// `eq`, `lt`, `gt`: every adjacent pair compares so (Python's `all()` stops at the
/// first pair that does not, so a later type error is not reached).
fn compare(op: &str, values: &Value, force_strings: bool) -> Result<bool, Failure> {
    let Value::Array(items) = values else {
        return Err(Failure::condition(format!(
            "Failed to check condition: '{op}' on values: {}: Expected list for 'values', got: {}",
            py_str(values, false),
            type_name(values)
        )));
    };
    if items.len() < 2 {
        return Ok(true);
    }
    let strings: Vec<Value>;
    let items = if force_strings {
        strings = items
            .iter()
            .map(|v| Value::String(py_str(v, false)))
            .collect();
        &strings
    } else {
        items
    };
    for pair in items.windows(2) {
        let holds = match op {
            "eq" => py::py_eq(&pair[0], &pair[1]),
            "lt" => {
                py::py_compare(&pair[0], &pair[1], Cmp::Lt).map_err(|e| Failure::Generic(e.0))?
            }
            _ => py::py_compare(&pair[0], &pair[1], Cmp::Gt).map_err(|e| Failure::Generic(e.0))?,
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A network as `netaddr.IPNetwork` reads it: an address, optionally `/prefix` or
/// `/netmask` (IPv4); host bits allowed.
fn parse_network(subnet: &Value) -> Option<(IpAddr, u8)> {
    let s = match subnet {
        Value::String(s) => s.as_str(),
        _ => return None,
    };
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let width: u8 = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => width,
        Some(p) => {
            let p = p.trim();
            if !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()) {
                p.parse::<u8>().ok().filter(|n| *n <= width)?
            } else {
                if !ip.is_ipv4() {
                    return None;
                }
                let m: std::net::Ipv4Addr = p.parse().ok()?;
                let bits = u32::from(m);
                if bits.leading_ones() + bits.trailing_zeros() == 32 {
                    u8::try_from(bits.leading_ones()).ok()?
                } else if bits.leading_zeros() + bits.trailing_ones() == 32 {
                    // A host mask (`0.0.0.255`).
                    u8::try_from(bits.leading_zeros()).ok()?
                } else {
                    return None;
                }
            }
        }
    };
    Some((ip, prefix))
}

/// An address as `netaddr.IPAddress` reads it (a string, or an integer).
fn parse_address(v: &Value) -> Option<IpAddr> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Bool(b) => Some(IpAddr::V4(u32::from(*b).into())),
        Value::Number(n) => {
            let n = n.as_u64()?;
            match u32::try_from(n) {
                Ok(v4) => Some(IpAddr::V4(v4.into())),
                Err(_) => Some(IpAddr::V6(u128::from(n).into())),
            }
        }
        _ => None,
    }
}

fn in_net(address: &Value, subnet: &Value) -> Result<bool, Failure> {
    let Some((net, prefix)) = parse_network(subnet) else {
        return Err(Failure::execution(format!(
            "invalid value: invalid IPNetwork {}",
            py_str(subnet, false)
        )));
    };
    let Some(ip) = parse_address(address) else {
        return Err(Failure::Generic(format!(
            "failed to detect a valid IP address from {}",
            py::py_repr(address, false)
        )));
    };
    Ok(match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let shift = 32 - u32::from(prefix);
            u32::from(n).checked_shr(shift).unwrap_or(0)
                == u32::from(a).checked_shr(shift).unwrap_or(0)
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let shift = 128 - u32::from(prefix);
            u128::from(n).checked_shr(shift).unwrap_or(0)
                == u128::from(a).checked_shr(shift).unwrap_or(0)
        }
        // Different families: never inside.
        _ => false,
    })
}

/// Compiles a rule's regular expression (upstream's `validate_regex`); `Ok` holds the
/// pattern and its compiled form.
fn compile(regex: &Value) -> Result<(&str, Regex), Failure> {
    let Value::String(pattern) = regex else {
        return Err(Failure::Generic(
            "first argument must be string or compiled pattern".into(),
        ));
    };
    let re = Regex::new(pattern).map_err(bad_regex)?;
    Ok((pattern, re))
}

fn bad_regex(e: regex::Error) -> Failure {
    Failure::execution(format!("invalid regular expression: {}", regex_error(&e)))
}

/// The gist of a regex error (its last line; the full text repeats the pattern).
fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(&text);
    line.trim().trim_start_matches("error: ").to_string()
}

/// `matches`: a `$` appended unless the regex ends with one, matched at the start.
fn matches(value: &Value, regex: &Value) -> Result<bool, Failure> {
    let (pattern, re) = compile(regex)?;
    if pattern.is_empty() {
        return Err(Failure::Generic("string index out of range".into()));
    }
    let re = if pattern.ends_with('$') {
        re
    } else {
        Regex::new(&format!("{pattern}$")).map_err(bad_regex)?
    };
    // The leftmost match starts at 0 whenever any match does.
    Ok(re
        .find(&py_str(value, false))
        .is_some_and(|m| m.start() == 0))
}

/// `contains`: the regex found anywhere.
fn contains(value: &Value, regex: &Value) -> Result<bool, Failure> {
    let (_, re) = compile(regex)?;
    Ok(re.is_match(&py_str(value, false)))
}
