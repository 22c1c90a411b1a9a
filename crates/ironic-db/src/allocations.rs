//! Allocations: their rows, and the reservation of a node for one, in one transaction.
//!
//! Who may write what (`docs/architecture.md`, Invariants):
//! - every write of the allocation process (its state, node, `last_error`,
//!   `conductor_affinity`: [`Db::allocation_claim`], [`Db::allocation_fail`], the
//!   allocation half of [`Db::allocation_backfill`], [`Db::allocation_take_over`]) is
//!   conditional on `conductor_affinity`: the row count tells a conductor whether it still
//!   owns the allocation (a conductor that took it over wins, and the loser's whole
//!   transaction rolls back);
//! - the API's PATCH ([`Db::allocation_update_meta`]) writes `name` and `extra` only,
//!   columns no conductor writes, in one statement: it needs no guard and overwrites
//!   nothing the allocation process wrote;
//! - a deletion ([`Db::allocation_destroy`]) is any conductor's to make, as upstream's:
//!   it locks the allocation row first (a claim in flight finishes before it, or finds
//!   the allocation gone and writes nothing), and frees the allocation's node only
//!   under that node's lock, or by one UPDATE guarded as the claim's is
//!   ([`NodeGuard::Unlocked`]).
//!
//! Node writes: the claim writes a node without taking its lock, by one UPDATE
//! guarded by `reservation IS NULL`, which is equivalent to taking the lock, writing
//! and giving it back (`docs/architecture.md`, "The allocation claim and the node
//! lock"); so does a deletion's [`NodeGuard::Unlocked`]; every other node write here
//! is conditional on the caller's lock.

use chrono::{DateTime, Utc};
use ironic_model::allocation::{self, Allocation, AllocationState};
use ironic_model::node::JsonObject;
use ironic_model::states::ProvisionState;
use ironic_model::{AllocationId, AllocationUuid, ConductorId, Error, NodeId, NodeUuid, secrets};
use serde_json::Value;
use sqlx::types::Json;

use crate::{Backend, Db, Pool, internal, with_pool};

/// The columns of an allocation, with its node's uuid read in the same statement.
const COLS: &str = "id, uuid, name, node_id, state, owner, last_error, resource_class, \
                    traits, candidate_nodes, extra, conductor_affinity, created_at, updated_at, \
                    (SELECT n.uuid FROM nodes n WHERE n.id = allocations.node_id) AS node_uuid";

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    uuid: String,
    name: Option<String>,
    node_id: Option<i64>,
    node_uuid: Option<String>,
    state: String,
    owner: Option<String>,
    last_error: Option<String>,
    resource_class: Option<String>,
    traits: Json<Vec<String>>,
    candidate_nodes: Json<Vec<String>>,
    extra: Json<JsonObject>,
    conductor_affinity: Option<i64>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl Row {
    fn into_allocation(self) -> Result<Allocation, Error> {
        let state = AllocationState::parse(&self.state).ok_or_else(|| {
            Error::internal(format!(
                "allocation {} has an unknown state {:?}",
                self.uuid, self.state
            ))
        })?;
        Ok(Allocation {
            id: AllocationId(self.id),
            uuid: AllocationUuid::from_db(self.uuid),
            name: self.name,
            node_id: self.node_id.map(NodeId),
            node_uuid: self.node_uuid.map(NodeUuid::from_db),
            resource_class: self.resource_class,
            candidate_nodes: self
                .candidate_nodes
                .0
                .into_iter()
                .map(NodeUuid::from_db)
                .collect(),
            traits: self.traits.0,
            state,
            last_error: self.last_error,
            conductor_affinity: self.conductor_affinity.map(ConductorId),
            owner: self.owner,
            extra: self.extra.0,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// Maps a unique violation to upstream's 409s.
fn write_error(e: sqlx::Error, a: &Allocation) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.is_unique_violation()
    {
        let what = db
            .constraint()
            .map(str::to_owned)
            .unwrap_or_else(|| db.message().to_owned());
        if what.contains("name") {
            return Error::Conflict(format!(
                "An allocation with name {} already exists.",
                a.name.as_deref().unwrap_or("")
            ));
        }
        return Error::Conflict(format!(
            "An allocation with UUID {} already exists.",
            a.uuid
        ));
    }
    internal("writing an allocation", e)
}

/// Filters of `GET /v1/allocations`.
#[derive(Debug, Clone, Default)]
pub struct AllocationFilter {
    pub state: Option<String>,
    pub resource_class: Option<String>,
    pub node_id: Option<NodeId>,
    pub owner: Option<String>,
}

/// Sort keys of `GET /v1/allocations` (the JSON columns are refused).
pub const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "name",
    "node_id",
    "state",
    "owner",
    "last_error",
    "resource_class",
    "conductor_affinity",
    "created_at",
    "updated_at",
];

/// What became of an attempt to reserve a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The node (id, uuid) is reserved and the allocation `active`.
    Reserved(NodeId, String),
    /// No matching node is free right now.
    NoneFree,
    /// The allocation is no longer ours (taken over, deleted, or no longer
    /// `allocating`): nothing was written.
    Lost,
}

/// How [`Db::allocation_destroy`] may free the allocation's node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeGuard<'a> {
    /// Not at all: a node still associated is named ([`Deletion::NodeHeld`]).
    None,
    /// The caller (`holder`) holds the node's lock.
    Holder(&'a str),
    /// Without taking the lock, as the claim writes a node: one UPDATE guarded by
    /// `reservation IS NULL` and by the node's state allowing it (in maintenance, or
    /// neither `active` nor moving through a state where updates are refused), which is
    /// equivalent to taking the lock, checking, writing and giving it back
    /// (`docs/architecture.md`, "The allocation claim and the node lock"). A locked or
    /// refusing node is named ([`Deletion::NodeHeld`]) for the caller to take the lock
    /// and say why.
    Unlocked,
}

/// The node states where a node that moves towards a target may still have its
/// allocation removed ([`ProvisionState::update_allowed`]), as SQL text.
fn update_allowed_sql() -> String {
    let states: Vec<String> = ProvisionState::ALL
        .iter()
        .filter(|s| s.update_allowed())
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    states.join(", ")
}

/// What became of a deletion ([`Db::allocation_destroy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// The allocation is gone and its node (if any) freed.
    Deleted,
    /// The allocation has this node, which the caller does not hold the lock of (a
    /// claim committed after the caller read the allocation): nothing was written;
    /// delete again under that node's lock.
    NodeHeld(NodeId),
}

/// What became of a backfill ([`Db::allocation_backfill`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backfill {
    /// The node is associated and the allocation `active`.
    Done,
    /// The node has another instance, or the caller's lock on it is gone: nothing
    /// was written.
    NodeTaken,
    /// The allocation is no longer this conductor's `allocating` one (deleted or
    /// taken over): nothing was written.
    Lost,
}

/// Why no node matched, for `last_error`; `None`: some match but are busy.
#[derive(Debug, Clone, PartialEq)]
pub enum Shortage {
    NoNodes,
    NoTraits,
    /// This many match but are locked by other operations.
    Busy(usize),
}

/// SQL conditions and their arguments for the nodes an allocation could take
/// (`$n` numbered from `first`).
struct Candidates {
    sql: String,
    args: Vec<String>,
    trait_count: Option<i64>,
}

/// The parameters of a claim, the same on both backends: `$1` the allocation's uuid,
/// `$2` its id, `$3` the time, `$4` the traits, then the candidates' values, their trait
/// count, and last the conductor the allocation must still belong to.
struct ClaimBinds<'a> {
    uuid: &'a str,
    id: i64,
    now: DateTime<Utc>,
    traits: &'a Value,
    candidates: &'a Candidates,
    affinity: i64,
}

/// Binds [`ClaimBinds`] to a query in their order (a macro: the query types of the two
/// backends have no common trait to bind through).
macro_rules! bind_claim {
    ($q:expr, $b:expr) => {{
        let b: &ClaimBinds<'_> = $b;
        let mut q = $q.bind(b.uuid).bind(b.id).bind(b.now).bind(Json(b.traits));
        for v in &b.candidates.args {
            q = q.bind(v);
        }
        if let Some(n) = b.candidates.trait_count {
            q = q.bind(n);
        }
        q.bind(b.affinity)
    }};
}

fn candidates(a: &Allocation, first: usize, traits: bool, name: Option<&str>) -> Candidates {
    let mut args: Vec<String> = Vec::new();
    let next = |v: &str, args: &mut Vec<String>| {
        args.push(v.to_string());
        format!("${}", first + args.len() - 1)
    };
    let rc = next(a.resource_class.as_deref().unwrap_or(""), &mut args);
    let mut sql = format!(
        "resource_class = {rc} AND provision_state = 'available' AND instance_uuid IS NULL \
         AND maintenance = FALSE AND power_state IS NOT NULL AND retired = FALSE"
    );
    if !a.candidate_nodes.is_empty() {
        let list: Vec<String> = a
            .candidate_nodes
            .iter()
            .map(|u| next(u, &mut args))
            .collect();
        sql.push_str(&format!(" AND uuid IN ({})", list.join(", ")));
    }
    if let Some(o) = &a.owner {
        let p = next(o, &mut args);
        sql.push_str(&format!(" AND (owner = {p} OR lessee = {p})"));
    }
    if let Some(n) = name {
        let p = next(n, &mut args);
        sql.push_str(&format!(" AND name = {p}"));
    }
    let mut trait_count = None;
    if traits && !a.traits.is_empty() {
        let mut wanted: Vec<&String> = a.traits.iter().collect();
        wanted.sort();
        wanted.dedup();
        let list: Vec<String> = wanted.iter().map(|t| next(t, &mut args)).collect();
        sql.push_str(&format!(
            " AND (SELECT COUNT(*) FROM node_traits t WHERE t.node_id = nodes.id AND t.trait IN ({})) = ${}",
            list.join(", "),
            first + args.len()
        ));
        trait_count = Some(wanted.len() as i64);
    }
    Candidates {
        sql,
        args,
        trait_count,
    }
}

/// The first free candidate. `ORDER BY id` matters: without it, `LIMIT 1` over the
/// many available nodes looks cheapest to the planner as a sequential scan, which
/// walks past every node already allocated (at 10,000 nodes, 2,000 allocations in:
/// 1.4 ms instead of 0.06, growing with each allocation); ordered by id it walks
/// `nodes_allocatable_idx`, which holds only nodes that could be taken.
fn candidate_select(c: &Candidates) -> String {
    format!(
        "SELECT id FROM nodes WHERE {} AND reservation IS NULL ORDER BY id LIMIT 1",
        c.sql
    )
}

impl Db {
    /// PostgreSQL's plan for the candidate search of [`Db::allocation_claim`] (see
    /// [`Db::node_list_plan`]).
    pub async fn allocation_candidate_plan(
        &self,
        a: &Allocation,
        name: Option<&str>,
    ) -> Result<Value, Error> {
        use crate::nodes::Arg as A;
        let c = candidates(a, 1, true, name);
        let mut args: Vec<A> = c.args.iter().map(|v| A::Text(Some(v.clone()))).collect();
        if let Some(n) = c.trait_count {
            args.push(A::I64(Some(n)));
        }
        self.explain(&candidate_select(&c), args).await
    }

    /// Stores a new allocation; 409 on a duplicate name or uuid.
    pub async fn allocation_create(&self, a: &Allocation) -> Result<Allocation, Error> {
        let sql = format!(
            "INSERT INTO allocations (uuid, name, node_id, state, owner, last_error, resource_class, \
             traits, candidate_nodes, extra, conductor_affinity, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, NULL) RETURNING {COLS}"
        );
        let row = with_pool!(self, |p| sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .bind(a.uuid.as_str())
        .bind(&a.name)
        .bind(a.node_id.map(|i| i.0))
        .bind(a.state.as_str())
        .bind(&a.owner)
        .bind(a.last_error.as_deref().map(secrets::stored_text))
        .bind(&a.resource_class)
        .bind(Json(&a.traits))
        .bind(Json(&a.candidate_nodes))
        .bind(Json(&a.extra))
        .bind(a.conductor_affinity.map(|i| i.0))
        .bind(a.created_at)
        .fetch_one(p)
        .await)
        .map_err(|e| write_error(e, a))?;
        row.into_allocation()
    }

    async fn allocation_where(
        &self,
        cond: &str,
        arg: Arg<'_>,
    ) -> Result<Option<Allocation>, Error> {
        let sql = format!("SELECT {COLS} FROM allocations WHERE {cond}");
        let row = with_pool!(self, |p| {
            let q = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql.as_str()));
            let q = match arg {
                Arg::Text(t) => q.bind(t),
                Arg::Int(i) => q.bind(i),
            };
            q.fetch_optional(p).await
        })
        .map_err(|e| internal("reading an allocation", e))?;
        row.map(Row::into_allocation).transpose()
    }

    pub async fn allocation_by_uuid(&self, uuid: &str) -> Result<Option<Allocation>, Error> {
        self.allocation_where("uuid = $1", Arg::Text(uuid)).await
    }

    pub async fn allocation_by_name(&self, name: &str) -> Result<Option<Allocation>, Error> {
        self.allocation_where("name = $1", Arg::Text(name)).await
    }

    pub async fn allocation_by_id(&self, id: AllocationId) -> Result<Option<Allocation>, Error> {
        let id = id.0;
        self.allocation_where("id = $1", Arg::Int(id)).await
    }

    /// The allocation of a node (the one whose `node_id` it is).
    pub async fn allocation_by_node(&self, node_id: NodeId) -> Result<Option<Allocation>, Error> {
        let node_id = node_id.0;
        self.allocation_where("node_id = $1 ORDER BY id LIMIT 1", Arg::Int(node_id))
            .await
    }

    /// A page of allocations: filters, sort, and the rows after `marker` (an id).
    pub async fn allocation_list(
        &self,
        f: &AllocationFilter,
        sort_key: &str,
        desc: bool,
        marker: Option<&Allocation>,
        limit: usize,
    ) -> Result<Vec<Allocation>, Error> {
        let (sql, args) = self.allocation_list_sql(f, sort_key, desc, marker, limit)?;
        let rows = with_pool!(self, |p| {
            let mut q = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql.as_str()));
            for a in args {
                q = match a {
                    ListArg::Text(t) => q.bind(t),
                    ListArg::OptText(t) => q.bind(t),
                    ListArg::Int(i) => q.bind(i),
                    ListArg::OptInt(i) => q.bind(i),
                    ListArg::Time(t) => q.bind(t),
                };
            }
            q.fetch_all(p).await
        })
        .map_err(|e| internal("listing allocations", e))?;
        rows.into_iter().map(Row::into_allocation).collect()
    }

    /// PostgreSQL's plan for [`Db::allocation_list`] (see [`Db::node_list_plan`]).
    pub async fn allocation_list_plan(
        &self,
        f: &AllocationFilter,
        sort_key: &str,
        desc: bool,
        marker: Option<&Allocation>,
        limit: usize,
    ) -> Result<Value, Error> {
        use crate::nodes::Arg as A;
        let (sql, args) = self.allocation_list_sql(f, sort_key, desc, marker, limit)?;
        let args = args
            .into_iter()
            .map(|a| match a {
                ListArg::Text(t) => A::Text(Some(t)),
                ListArg::OptText(t) => A::Text(t),
                ListArg::Int(i) => A::I64(Some(i)),
                ListArg::OptInt(i) => A::I64(i),
                ListArg::Time(t) => A::Time(t),
            })
            .collect();
        self.explain(&sql, args).await
    }

    fn allocation_list_sql(
        &self,
        f: &AllocationFilter,
        sort_key: &str,
        desc: bool,
        marker: Option<&Allocation>,
        limit: usize,
    ) -> Result<(String, Vec<ListArg>), Error> {
        if !SORT_KEYS.contains(&sort_key) {
            return Err(Error::invalid(format!(
                "The sort_key value \"{sort_key}\" is an invalid field for sorting"
            )));
        }
        let mut conds: Vec<String> = Vec::new();
        let mut args: Vec<ListArg> = Vec::new();
        let push = |c: &str, a: ListArg, conds: &mut Vec<String>, args: &mut Vec<ListArg>| {
            args.push(a);
            conds.push(c.replace('?', &format!("${}", args.len())));
        };
        if let Some(s) = &f.state {
            push("state = ?", ListArg::Text(s.clone()), &mut conds, &mut args);
        }
        if let Some(s) = &f.resource_class {
            push(
                "resource_class = ?",
                ListArg::Text(s.clone()),
                &mut conds,
                &mut args,
            );
        }
        if let Some(n) = f.node_id {
            push("node_id = ?", ListArg::Int(n.0), &mut conds, &mut args);
        }
        if let Some(o) = &f.owner {
            push("owner = ?", ListArg::Text(o.clone()), &mut conds, &mut args);
        }
        let (cmp, dir) = if desc { ("<", "DESC") } else { (">", "ASC") };
        // A free-text key sorts by its first characters on PostgreSQL, what its index
        // holds (migrations/postgres/0017_list_indexes.sql).
        let key = match (sort_key, self.backend()) {
            ("last_error", Backend::Postgres) => {
                format!("left(last_error, {})", crate::nodes::LONG_KEY)
            }
            (k, _) => k.to_string(),
        };
        if let Some(m) = marker {
            // Rows after the marker in (sort key, id) order; NULLs sort first ascending.
            let (value, null) = match sort_key {
                "id" => (ListArg::Int(m.id.0), false),
                "uuid" => (ListArg::Text(m.uuid.to_string()), false),
                "name" => (ListArg::OptText(m.name.clone()), m.name.is_none()),
                "node_id" => (ListArg::OptInt(m.node_id.map(|i| i.0)), m.node_id.is_none()),
                "state" => (ListArg::Text(m.state.as_str().into()), false),
                "owner" => (ListArg::OptText(m.owner.clone()), m.owner.is_none()),
                "last_error" => (
                    ListArg::OptText(match self.backend() {
                        // The sort key is its first characters there (`key` below).
                        Backend::Postgres => m
                            .last_error
                            .as_ref()
                            .map(|e| e.chars().take(crate::nodes::LONG_KEY).collect()),
                        Backend::Sqlite => m.last_error.clone(),
                    }),
                    m.last_error.is_none(),
                ),
                "resource_class" => (
                    ListArg::OptText(m.resource_class.clone()),
                    m.resource_class.is_none(),
                ),
                "conductor_affinity" => (
                    ListArg::OptInt(m.conductor_affinity.map(|i| i.0)),
                    m.conductor_affinity.is_none(),
                ),
                "created_at" => (ListArg::Time(Some(m.created_at)), false),
                _ => (ListArg::Time(m.updated_at), m.updated_at.is_none()),
            };
            args.push(ListArg::Int(m.id.0));
            let id_p = args.len();
            if sort_key == "id" {
                conds.push(format!("id {cmp} ${id_p}"));
            } else {
                let k = &key;
                if null {
                    // NULLs sort first ascending, last descending.
                    conds.push(if desc {
                        format!("({k} IS NULL AND id < ${id_p})")
                    } else {
                        format!("(({k} IS NULL AND id > ${id_p}) OR {k} IS NOT NULL)")
                    });
                } else {
                    args.push(value);
                    let v = args.len();
                    conds.push(if desc {
                        format!("({k} < ${v} OR ({k} = ${v} AND id < ${id_p}) OR {k} IS NULL)")
                    } else {
                        format!("({k} > ${v} OR ({k} = ${v} AND id > ${id_p}))")
                    });
                }
            }
        }
        // SQLite sorts NULLs first ascending; PostgreSQL is told so for the nullable
        // keys only (a NOT NULL key keeps the default, which its index has).
        let nullable = !matches!(sort_key, "id" | "uuid" | "state" | "created_at");
        let nulls = match (self.backend(), desc, nullable) {
            (Backend::Postgres, false, true) => " NULLS FIRST",
            (Backend::Postgres, true, true) => " NULLS LAST",
            _ => "",
        };
        let where_ = if conds.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", conds.join(" AND "))
        };
        let sql = format!(
            "SELECT {COLS} FROM allocations {where_} ORDER BY {key} {dir}{nulls}, id {dir} LIMIT {limit}"
        );
        Ok((sql, args))
    }

    /// Saves `name` and `extra` (PATCH); 409 on a duplicate name.
    pub async fn allocation_update_meta(&self, a: &Allocation) -> Result<Allocation, Error> {
        let sql = format!(
            "UPDATE allocations SET name = $1, extra = $2, updated_at = $3 WHERE id = $4 RETURNING {COLS}"
        );
        let row = with_pool!(self, |p| sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .bind(&a.name)
        .bind(Json(&a.extra))
        .bind(ironic_model::node::now())
        .bind(a.id.0)
        .fetch_optional(p)
        .await)
        .map_err(|e| write_error(e, a))?;
        row.ok_or_else(|| allocation::not_found(&a.uuid))?
            .into_allocation()
    }

    /// Marks an allocation we own as failed; false if it is no longer ours (nothing
    /// written).
    pub async fn allocation_fail(
        &self,
        id: AllocationId,
        affinity: ConductorId,
        last_error: &str,
    ) -> Result<bool, Error> {
        let id = id.0;
        let affinity = affinity.0;
        let sql = "UPDATE allocations SET state = 'error', last_error = $1, node_id = NULL, updated_at = $2 \
                   WHERE id = $3 AND conductor_affinity = $4 AND state = 'allocating'";
        let last_error = secrets::stored_text(last_error);
        let rows = with_pool!(self, |p| sqlx::query(sql)
            .bind(&last_error)
            .bind(ironic_model::node::now())
            .bind(id)
            .bind(affinity)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("failing an allocation", e))?;
        Ok(rows == 1)
    }

    /// Reserves a free matching node for an allocation we own, in one transaction:
    /// the node gets `instance_uuid` = the allocation's uuid, `allocation_id` and
    /// `instance_info.traits`; the allocation gets `node_id` and `active`. With
    /// `name`, only the node of that name is tried.
    ///
    /// The node is picked by one conditional UPDATE (PostgreSQL: `FOR UPDATE SKIP
    /// LOCKED`, so concurrent reservations take different nodes without waiting; SQLite
    /// serialises writers). Nodes locked by another operation are skipped.
    pub async fn allocation_claim(
        &self,
        a: &Allocation,
        affinity: ConductorId,
        name: Option<&str>,
    ) -> Result<Claim, Error> {
        let affinity = affinity.0;
        let c = candidates(a, 5, true, name);
        // The node's `instance_info.traits` is set by the same UPDATE that claims it: one
        // row version and one round trip fewer than reading and writing it back.
        let (skip, set_traits) = match self.backend() {
            Backend::Postgres => (
                " FOR UPDATE SKIP LOCKED",
                "jsonb_set(instance_info, '{traits}', $4)",
            ),
            Backend::Sqlite => ("", "json_set(instance_info, '$.traits', json($4))"),
        };
        // The allocation must still be ours and `allocating`: checked by the node's
        // UPDATE itself, so a lost allocation never touches a node.
        let aff = c.args.len() + 5 + usize::from(c.trait_count.is_some());
        let ours = match self.backend() {
            Backend::Postgres => "a".to_string(),
            Backend::Sqlite => format!(
                "allocations al WHERE al.id = $2 AND al.conductor_affinity = ${aff} \
                 AND al.state = 'allocating'"
            ),
        };
        let claim = format!(
            "UPDATE nodes SET instance_uuid = $1, allocation_id = $2, updated_at = $3, \
             instance_info = {set_traits} \
             WHERE id = ({}{skip}) \
             AND instance_uuid IS NULL AND reservation IS NULL AND EXISTS (SELECT 1 FROM {ours}) \
             RETURNING id, uuid",
            candidate_select(&c)
        );
        let now = ironic_model::node::now();
        let traits = Value::Array(a.traits.iter().cloned().map(Value::String).collect());
        let binds = ClaimBinds {
            uuid: &a.uuid,
            id: a.id.0,
            now,
            traits: &traits,
            candidates: &c,
            affinity,
        };
        let p = match &self.pool {
            Pool::Postgres(p) => return self.allocation_claim_pg(p, &claim, aff, &binds).await,
            Pool::Sqlite(p) => p,
        };
        let res: Result<Claim, sqlx::Error> = async {
            let mut tx = p.begin().await?;
            let q = sqlx::query_as::<_, (i64, String)>(sqlx::AssertSqlSafe(claim.as_str()));
            let Some((node_id, node_uuid)) = bind_claim!(q, &binds)
                .fetch_optional(&mut *tx)
                .await?
            else {
                let ours: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM allocations WHERE id = $1 AND conductor_affinity = $2 \
                     AND state = 'allocating'",
                )
                .bind(a.id.0)
                .bind(affinity)
                .fetch_one(&mut *tx)
                .await?;
                tx.rollback().await?;
                return Ok(if ours == 1 { Claim::NoneFree } else { Claim::Lost });
            };
            sqlx::query(
                "UPDATE allocations SET node_id = $1, state = 'active', last_error = NULL, updated_at = $2 \
                 WHERE id = $3",
            )
            .bind(node_id)
            .bind(now)
            .bind(a.id.0)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(Claim::Reserved(NodeId(node_id), node_uuid))
        }
        .await;
        res.map_err(|e| internal("reserving a node for an allocation", e))
    }

    /// [`Db::allocation_claim`] on PostgreSQL: one statement, one round trip (instead of
    /// BEGIN, two UPDATEs, COMMIT). The allocation is locked first (`FOR UPDATE`: a
    /// take-over or a deletion waits, or has already won and the allocation no longer
    /// matches); only if it is still ours and `allocating` is a node claimed (`EXISTS`
    /// on `a`, a one-time filter), and the allocation activated with it.
    async fn allocation_claim_pg(
        &self,
        p: &sqlx::PgPool,
        claim: &str,
        aff: usize,
        binds: &ClaimBinds<'_>,
    ) -> Result<Claim, Error> {
        let sql = format!(
            "WITH a AS (SELECT id FROM allocations WHERE id = $2 AND conductor_affinity = ${aff} \
             AND state = 'allocating' FOR UPDATE), \
             claimed AS ({claim}), \
             act AS (UPDATE allocations SET node_id = claimed.id, state = 'active', \
             last_error = NULL, updated_at = $3 FROM claimed WHERE allocations.id = $2 \
             RETURNING allocations.id) \
             SELECT EXISTS (SELECT 1 FROM a), (SELECT id FROM claimed), (SELECT uuid FROM claimed), \
             (SELECT count(*) FROM act)"
        );
        let q = sqlx::query_as::<_, (bool, Option<i64>, Option<String>, i64)>(sqlx::AssertSqlSafe(
            sql.as_str(),
        ));
        let row = bind_claim!(q, binds)
            .fetch_one(p)
            .await
            .map_err(|e| internal("reserving a node for an allocation", e))?;
        Ok(match row {
            (false, _, _, _) => Claim::Lost,
            (true, Some(id), Some(uuid), 1) => Claim::Reserved(NodeId(id), uuid),
            (true, None, _, _) => Claim::NoneFree,
            // Cannot happen: the allocation is locked by `a` before the node is claimed.
            // The statement has committed: this only reports it.
            other => {
                return Err(Error::internal(format!(
                    "reserving a node for allocation {}: node claimed but the allocation not activated ({other:?})",
                    binds.uuid
                )));
            }
        })
    }

    /// Why [`Db::allocation_claim`] found nothing.
    pub async fn allocation_shortage(&self, a: &Allocation) -> Result<Shortage, Error> {
        let count = |traits: bool| {
            let c = candidates(a, 1, traits, None);
            let sql = format!("SELECT COUNT(*) FROM nodes WHERE {}", c.sql);
            async move {
                with_pool!(self, |p| {
                    let mut q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.as_str()));
                    for v in &c.args {
                        q = q.bind(v);
                    }
                    if let Some(n) = c.trait_count {
                        q = q.bind(n);
                    }
                    q.fetch_one(p).await
                })
                .map_err(|e| internal("counting allocation candidates", e))
            }
        };
        if count(false).await? == 0 {
            return Ok(Shortage::NoNodes);
        }
        match count(true).await? {
            0 => Ok(Shortage::NoTraits),
            n => Ok(Shortage::Busy(usize::try_from(n).unwrap_or(usize::MAX))),
        }
    }

    /// Backfills an allocation we own (`affinity`, `allocating`) for a node we hold the
    /// lock of (`holder`), in one transaction as [`Db::allocation_claim`]: both writes
    /// happen or neither.
    pub async fn allocation_backfill(
        &self,
        a: &Allocation,
        node_id: NodeId,
        holder: &str,
        affinity: ConductorId,
    ) -> Result<Backfill, Error> {
        let node_id = node_id.0;
        let now = ironic_model::node::now();
        let traits = Value::Array(a.traits.iter().cloned().map(Value::String).collect());
        let res: Result<Backfill, sqlx::Error> = with_pool!(self, |p| {
            async {
            let mut tx = p.begin().await?;
            // The allocation first, as a claim and a deletion lock it: still ours?
            let n = sqlx::query(
                "UPDATE allocations SET node_id = $1, state = 'active', last_error = NULL, updated_at = $2 \
                 WHERE id = $3 AND conductor_affinity = $4 AND state = 'allocating'",
            )
            .bind(node_id)
            .bind(now)
            .bind(a.id.0)
            .bind(affinity.0)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n != 1 {
                tx.rollback().await?;
                return Ok(Backfill::Lost);
            }
            let row = sqlx::query_as::<_, (Json<JsonObject>,)>(
                "UPDATE nodes SET instance_uuid = $1, allocation_id = $2, updated_at = $3 \
                 WHERE id = $4 AND reservation = $5 AND (instance_uuid IS NULL OR instance_uuid = $1) \
                 RETURNING instance_info",
            )
            .bind(a.uuid.as_str())
            .bind(a.id.0)
            .bind(now)
            .bind(node_id)
            .bind(holder)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((Json(mut info),)) = row else {
                tx.rollback().await?;
                return Ok(Backfill::NodeTaken);
            };
            info.insert("traits".into(), traits.clone());
            sqlx::query("UPDATE nodes SET instance_info = $1 WHERE id = $2 AND reservation = $3")
                .bind(Json(&info))
                .bind(node_id)
                .bind(holder)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Backfill::Done)
        }
        .await
        });
        res.map_err(|e| write_error(e, a))
    }

    /// Deletes an allocation and frees its node (`allocation_id`, `instance_uuid`), in
    /// one transaction; 404 if it is already gone.
    ///
    /// The allocation row is locked first (PostgreSQL `FOR UPDATE`; SQLite serialises
    /// writers): a claim in flight commits before, and its node is then seen here, or
    /// finds the allocation gone and writes nothing. Its node is written only under the
    /// node's lock: `holder` is the caller's lock on the node the caller read the
    /// allocation with (`None`: it had none). A node the caller does not hold (a claim
    /// committed after the caller read the allocation) is [`Deletion::NodeHeld`] and
    /// nothing is written.
    pub async fn allocation_destroy(
        &self,
        a: &Allocation,
        guard: NodeGuard<'_>,
    ) -> Result<Deletion, Error> {
        let postgres = self.backend() == Backend::Postgres;
        let unlocked_sql = format!(
            "UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = $1 \
             WHERE allocation_id = $2 AND reservation IS NULL AND (maintenance = TRUE OR \
             (provision_state <> 'active' AND (target_provision_state IS NULL \
             OR provision_state IN ({}))))",
            update_allowed_sql()
        );
        let res: Result<Result<Deletion, Error>, sqlx::Error> = with_pool!(self, |p| {
            async {
                let mut tx = p.begin().await?;
                // The allocation first. On SQLite a write statement takes the database's
                // write lock (a transaction that read first could not write later).
                let lock = if postgres {
                    "SELECT 1 FROM allocations WHERE id = $1 FOR UPDATE"
                } else {
                    "UPDATE allocations SET id = id WHERE id = $1"
                };
                sqlx::query(lock).bind(a.id.0).execute(&mut *tx).await?;
                match guard {
                    NodeGuard::None => {}
                    NodeGuard::Holder(holder) => {
                        sqlx::query(
                            "UPDATE nodes SET allocation_id = NULL, instance_uuid = NULL, updated_at = $1 \
                             WHERE allocation_id = $2 AND reservation = $3",
                        )
                        .bind(ironic_model::node::now())
                        .bind(a.id.0)
                        .bind(holder)
                        .execute(&mut *tx)
                        .await?;
                    }
                    NodeGuard::Unlocked => {
                        sqlx::query(sqlx::AssertSqlSafe(unlocked_sql.as_str()))
                            .bind(ironic_model::node::now())
                            .bind(a.id.0)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                // Any node still associated is one the caller does not hold.
                let other: Option<i64> = sqlx::query_scalar(
                    "SELECT id FROM nodes WHERE allocation_id = $1 ORDER BY id LIMIT 1",
                )
                .bind(a.id.0)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(node) = other {
                    tx.rollback().await?;
                    return Ok(Ok(Deletion::NodeHeld(NodeId(node))));
                }
                let n = sqlx::query("DELETE FROM allocations WHERE id = $1")
                    .bind(a.id.0)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n != 1 {
                    tx.rollback().await?;
                    return Ok(Err(allocation::not_found(&a.uuid)));
                }
                tx.commit().await?;
                Ok(Ok(Deletion::Deleted))
            }
            .await
        });
        res.map_err(|e| internal("deleting an allocation", e))?
    }

    /// The `allocating` allocations of conductor `id` (`mine`), or of every other
    /// conductor or none (`!mine`), oldest first: `(id, affinity)`.
    pub async fn allocations_allocating(
        &self,
        id: ConductorId,
        mine: bool,
    ) -> Result<Vec<(AllocationId, Option<ConductorId>)>, Error> {
        let id = id.0;
        let sql = if mine {
            "SELECT id, conductor_affinity FROM allocations WHERE state = 'allocating' AND conductor_affinity = $1 ORDER BY id"
        } else {
            "SELECT id, conductor_affinity FROM allocations WHERE state = 'allocating' AND (conductor_affinity IS NULL OR conductor_affinity <> $1) ORDER BY id"
        };
        let rows = with_pool!(self, |p| sqlx::query_as::<_, (i64, Option<i64>)>(sql)
            .bind(id)
            .fetch_all(p)
            .await)
        .map_err(|e| internal("listing allocations in progress", e))?;
        Ok(rows
            .into_iter()
            .map(|(id, affinity)| (AllocationId(id), affinity.map(ConductorId)))
            .collect())
    }

    /// Moves an `allocating` allocation from conductor `old` to `new`; true for the one
    /// caller that wins.
    pub async fn allocation_take_over(
        &self,
        id: AllocationId,
        old: Option<ConductorId>,
        new: ConductorId,
    ) -> Result<bool, Error> {
        let id = id.0;
        let old = old.map(|o| o.0);
        let new = new.0;
        let sql = "UPDATE allocations SET conductor_affinity = $1, updated_at = $2 \
                   WHERE id = $3 AND state = 'allocating' \
                   AND (conductor_affinity = $4 OR (conductor_affinity IS NULL AND $4 IS NULL))";
        let rows = with_pool!(self, |p| sqlx::query(sql)
            .bind(new)
            .bind(ironic_model::node::now())
            .bind(id)
            .bind(old)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("taking over an allocation", e))?;
        Ok(rows == 1)
    }
}

enum Arg<'a> {
    Text(&'a str),
    Int(i64),
}

enum ListArg {
    Text(String),
    OptText(Option<String>),
    Int(i64),
    OptInt(Option<i64>),
    Time(Option<DateTime<Utc>>),
}
