//! `GET /v1/shards` (1.82): every shard nodes name, with how many nodes are in it
//! (`None` counts the nodes without one, as upstream's answer names them).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use ironic_model::Error;
use serde_json::json;

use crate::error::ApiError;
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::{AppState, Req, json_response};

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    if !req.version.at_least(82) {
        return Err(Error::NotFound("The API version does not allow shards".into()).into());
    }
    authz.check(Policy::ShardsGet)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let counts = st.db.shard_counts().await?;
    let mut list: Vec<(String, i64)> = counts
        .into_iter()
        .map(|(name, n)| (name.unwrap_or_else(|| "None".into()), n))
        .collect();
    list.sort();
    let shards: Vec<_> = list
        .into_iter()
        .map(|(name, count)| json!({"name": name, "count": count}))
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "shards": shards })))
}
