//! Keyset pagination of the small catalogues (deploy templates, runbooks, inspection
//! rules): a page is the rows after the marker's `(sort key, id)`, in that order, never
//! an OFFSET. The node and port lists have their own builder (`nodes.rs`), with filters
//! and indexes of their own.

use crate::Backend;

/// The SQL of one page: its conditions (the marker's, and any filter), the `ORDER BY …
/// LIMIT …` tail, and the text arguments bound to `$1`, `$2`, … in that order.
pub(crate) struct Page {
    conds: Vec<String>,
    order: String,
    pub args: Vec<String>,
}

impl Page {
    /// Binds `value`; its placeholder.
    pub fn bind(&mut self, value: String) -> String {
        self.args.push(value);
        format!("${}", self.args.len())
    }

    /// Adds a condition rows must meet.
    pub fn filter(&mut self, cond: String) {
        self.conds.push(cond);
    }

    /// `WHERE … ORDER BY … LIMIT …`, to follow `FROM <table>`.
    pub fn tail(&self) -> String {
        match self.conds.is_empty() {
            true => self.order.clone(),
            false => format!("WHERE {} {}", self.conds.join(" AND "), self.order),
        }
    }
}

/// The page of `table` sorted by `sort_key` (a column, checked against `allowed`: it is
/// written into the SQL), then `id`, after the row whose id is `marker`.
pub(crate) fn page(
    backend: Backend,
    table: &str,
    allowed: &[&str],
    sort_key: &str,
    desc: bool,
    marker: Option<i64>,
    limit: usize,
) -> Result<Page, ironic_model::Error> {
    if !allowed.contains(&sort_key) {
        return Err(ironic_model::Error::invalid(format!(
            "The sort_key value \"{sort_key}\" is an invalid field for sorting"
        )));
    }
    let (cmp, dir) = if desc { ("<", "DESC") } else { (">", "ASC") };
    // `updated_at` may be NULL: it sorts first ascending, on both backends (the
    // expression of its index, migrations/*/0017_list_indexes.sql).
    let key = match (sort_key, backend) {
        ("updated_at", Backend::Postgres) => {
            "COALESCE(updated_at, '-infinity'::timestamptz)".to_string()
        }
        ("updated_at", Backend::Sqlite) => "COALESCE(updated_at, '')".to_string(),
        (k, _) => k.to_string(),
    };
    let mut page = Page {
        conds: Vec::new(),
        order: format!("ORDER BY {key} {dir}, id {dir} LIMIT {limit}"),
        args: Vec::new(),
    };
    if let Some(id) = marker {
        let m = page.bind(id.to_string());
        let mk = format!("(SELECT {key} FROM {table} WHERE id = CAST({m} AS BIGINT))");
        page.filter(format!(
            "({key} {cmp} {mk} OR ({key} = {mk} AND id {cmp} CAST({m} AS BIGINT)))"
        ));
    }
    Ok(page)
}
