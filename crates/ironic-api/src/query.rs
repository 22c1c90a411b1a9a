//! Query strings: parsed once, every argument checked, strict booleans.

use ironic_model::node::{bool_word_error, parse_bool_word};

use crate::error::ApiError;

/// The decoded `name=value` pairs of a query string.
#[derive(Debug, Default)]
pub struct Query(pub Vec<(String, String)>);

impl Query {
    /// Decodes the query string; NUL characters (which no database stores) are 400.
    pub fn parse(raw: Option<&str>) -> Result<Query, ApiError> {
        let pairs: Vec<(String, String)> = raw
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        if pairs
            .iter()
            .any(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(ApiError::invalid(
                "Query arguments must not contain NUL characters.",
            ));
        }
        Ok(Query(pairs))
    }

    /// The last value given for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }

    /// A strict boolean argument (`true/false/yes/no/1/0/on/off/t/f/y/n`).
    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => parse_bool_word(v)
                .map(Some)
                .ok_or_else(|| bool_word_error(name, v).into()),
        }
    }

    /// Refuses arguments outside `allowed`.
    pub fn only(&self, allowed: &[&str]) -> Result<(), ApiError> {
        let mut bad: Vec<&str> = self
            .0
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !allowed.contains(k))
            .collect();
        if bad.is_empty() {
            return Ok(());
        }
        bad.sort_unstable();
        bad.dedup();
        Err(ApiError::invalid(format!(
            "Unexpected arguments: {}",
            bad.join(", ")
        )))
    }

    /// `limit`: positive, capped at `max`, default `max`.
    /// The `next` link of a page: `<base>/v1/<path>?<the other arguments>limit=…&marker=…`.
    pub fn next_link(&self, base: &str, path: &str, limit: u32, marker: &str) -> String {
        let kept: String = self
            .0
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "limit" | "marker"))
            .map(|(k, v)| format!("{k}={}&", ironic_model::percent::encode_list(v)))
            .collect();
        format!(
            "{base}/v1/{path}?{kept}limit={limit}&marker={}",
            ironic_model::percent::encode_list(marker)
        )
    }

    /// A list page's body: `{<key>: docs}`, and a `next` link after the last item when
    /// the page is full (`last` is its marker).
    pub fn page(
        &self,
        base: &str,
        key: &str,
        docs: Vec<serde_json::Value>,
        limit: usize,
        last: Option<&str>,
    ) -> serde_json::Value {
        let full = docs.len() == limit;
        let mut body = serde_json::Map::new();
        body.insert(key.into(), serde_json::Value::Array(docs));
        if full && let Some(last) = last {
            body.insert(
                "next".into(),
                self.next_link(base, key, limit as u32, last).into(),
            );
        }
        serde_json::Value::Object(body)
    }

    pub fn limit(&self, max: u32) -> Result<u32, ApiError> {
        match self.get("limit") {
            None => Ok(max),
            Some(v) => {
                let n: i64 = v.trim().parse().map_err(|_| {
                    ApiError::invalid(format!("Invalid value for limit: {v:?} is not an integer"))
                })?;
                if n <= 0 {
                    return Err(ApiError::invalid("Limit must be positive"));
                }
                Ok(n.min(i64::from(max)) as u32)
            }
        }
    }

    /// `sort_dir`: `asc` (default) or `desc`; true for descending.
    pub fn sort_desc(&self) -> Result<bool, ApiError> {
        match self.get("sort_dir") {
            None | Some("asc") => Ok(false),
            Some("desc") => Ok(true),
            Some(other) => Err(ApiError::invalid(format!(
                "Invalid sort direction: {other}. Acceptable values are 'asc' or 'desc'"
            ))),
        }
    }
}

/// A `fields=a,b` list checked against a resource's `known` fields (in upstream's
/// order), returned in that order: 400 `Field x is not a valid field.` for any other.
pub fn field_list(list: &str, known: &[&'static str]) -> Result<Vec<&'static str>, ApiError> {
    let mut out = Vec::new();
    for f in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match known.iter().find(|x| **x == f) {
            Some(x) => out.push(*x),
            None => {
                return Err(ApiError::invalid(format!(
                    "Field {f} is not a valid field."
                )));
            }
        }
    }
    out.sort_by_key(|f| known.iter().position(|x| x == f));
    // A field named twice shows once.
    out.dedup();
    Ok(out)
}
