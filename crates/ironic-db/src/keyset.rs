//! Keyset pagination of the small catalogues (deploy templates, runbooks, inspection
//! rules): a page is the rows after the marker's `(sort key, id)`, in that order, never
//! an OFFSET. The node and port lists have their own builder (`nodes.rs`), with filters
//! and indexes of their own.

use crate::Backend;

/// The SQL of one page: `after` (a condition, `None` for the first page) and the
/// `ORDER BY … LIMIT …` tail.
pub(crate) struct Page {
    pub after: Option<String>,
    pub order: String,
}

/// The page of `table` sorted by `sort_key` (a column, checked against `allowed`: it is
/// written into the SQL), then `id`, after the row whose id is bound at `marker` (a
/// parameter such as `$1`, bound as text).
pub(crate) fn page(
    backend: Backend,
    table: &str,
    allowed: &[&str],
    sort_key: &str,
    desc: bool,
    marker: Option<&str>,
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
    let after = marker.map(|m| {
        let mk = format!("(SELECT {key} FROM {table} WHERE id = CAST({m} AS BIGINT))");
        format!("({key} {cmp} {mk} OR ({key} = {mk} AND id {cmp} CAST({m} AS BIGINT)))")
    });
    Ok(Page {
        after,
        order: format!("ORDER BY {key} {dir}, id {dir} LIMIT {limit}"),
    })
}
