//! Query strings: parsed once, every argument checked, strict booleans.

use ironic_model::node::{bool_word_error, parse_bool_word};

use serde_json::Value;

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

/// How a list's `next` link repeats the request (upstream's, which differs by
/// resource).
#[derive(Debug, Clone)]
pub enum LinkArgs {
    /// The request's arguments but `limit` and `marker`, in their order.
    Kept,
    /// `sort_key` and `sort_dir` first (as the list ran, defaults included), then, with
    /// `others`, the request's arguments but `fields`, then `fields` (given here:
    /// what the resource shows).
    Sorted {
        others: bool,
        fields: Option<String>,
    },
}

/// The arguments every list takes, parsed and checked once
/// ([`Query::list_params`]), and the one writer of its page's `next` link.
#[derive(Debug)]
pub struct ListParams<'q> {
    q: &'q Query,
    /// Positive, at most `[api] max_limit`, which is the default.
    pub limit: u32,
    /// `sort_dir=desc`.
    pub desc: bool,
    /// `sort_key`, `id` by default.
    pub sort_key: &'q str,
    pub marker: Option<&'q str>,
}

impl Query {
    /// `limit`, `sort_dir`, `sort_key` and `marker`: 400 for a bad limit or
    /// direction, or (`sort_keys` given) a key the list does not sort by; without
    /// `sort_keys` the database's query checks the key.
    pub fn list_params(
        &self,
        max_limit: u32,
        sort_keys: Option<&[&str]>,
    ) -> Result<ListParams<'_>, ApiError> {
        let sort_key = self.get("sort_key").unwrap_or("id");
        if let Some(keys) = sort_keys
            && !keys.contains(&sort_key)
        {
            return Err(ApiError::invalid(format!(
                "The sort_key value {sort_key} is an invalid field for sorting"
            )));
        }
        Ok(ListParams {
            q: self,
            limit: self.limit(max_limit)?,
            desc: self.sort_desc()?,
            sort_key,
            marker: self.get("marker"),
        })
    }
}

impl ListParams<'_> {
    /// The page size, as a count.
    pub fn size(&self) -> usize {
        self.limit as usize
    }

    /// The `next` link of a page of `count` items whose last one's marker is `last`:
    /// `<base>/v1/<path>?<args>limit=…&marker=…`, only when the page is full.
    pub fn next(
        &self,
        base: &str,
        path: &str,
        how: &LinkArgs,
        count: usize,
        last: Option<&str>,
    ) -> Option<String> {
        use ironic_model::percent::encode_list;
        let last = last.filter(|_| count == self.size())?;
        let arg = |k: &str, v: &str| format!("{k}={}", encode_list(v));
        let mut args: Vec<String> = Vec::new();
        let others = |skip: &[&str]| -> Vec<String> {
            self.q
                .0
                .iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| arg(k, v))
                .collect()
        };
        match how {
            LinkArgs::Kept => args.extend(others(&["limit", "marker"])),
            LinkArgs::Sorted {
                others: all,
                fields,
            } => {
                args.push(arg("sort_key", self.sort_key));
                args.push(format!(
                    "sort_dir={}",
                    if self.desc { "desc" } else { "asc" }
                ));
                if *all {
                    args.extend(others(&[
                        "limit", "marker", "fields", "sort_key", "sort_dir",
                    ]));
                }
                if let Some(f) = fields {
                    args.push(arg("fields", f));
                }
            }
        }
        args.push(format!("limit={}", self.limit));
        args.push(arg("marker", last));
        Some(format!("{base}/v1/{path}?{}", args.join("&")))
    }

    /// A list page's body: `{<key>: docs}`, and the `next` link ([`LinkArgs::Kept`])
    /// of the list at `path`.
    pub fn page(
        &self,
        base: &str,
        path: &str,
        key: &str,
        docs: Vec<Value>,
        last: Option<&str>,
    ) -> Value {
        self.page_with(base, path, key, docs, &LinkArgs::Kept, last)
    }

    /// [`ListParams::page`] with the `next` link's arguments as `how` says.
    pub fn page_with(
        &self,
        base: &str,
        path: &str,
        key: &str,
        docs: Vec<Value>,
        how: &LinkArgs,
        last: Option<&str>,
    ) -> Value {
        let next = self.next(base, path, how, docs.len(), last);
        let mut body = serde_json::Map::new();
        body.insert(key.into(), Value::Array(docs));
        if let Some(n) = next {
            body.insert("next".into(), n.into());
        }
        Value::Object(body)
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
