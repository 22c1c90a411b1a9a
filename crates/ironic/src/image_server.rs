//! The image server: `[deploy] http_root` served read-only over HTTP on `[deploy]
//! http_listen`, so that the all-in-one (and a conductor without an operator's web
//! server) can hand BMCs their boot ISOs and agents their images with no other daemon.
//! What it publishes is written by the conductor (`ironic-conductor` `images.rs`).
//!
//! tower-http's `ServeDir` does the serving: `GET` and `HEAD` only (others: 405), paths
//! confined to the folder (a `..` component or an encoded one is refused with 404),
//! byte ranges (`Range`, 206) for BMCs that fetch an ISO piecewise, no folder
//! listings, no `index.html`. The process's HTTP limits apply (`ops::serve`: header
//! and request timeouts), with `[deploy] http_max_connections` requests at once.

use std::path::Path;

use tower_http::services::ServeDir;

/// The image server's routes: every path is a file under `root` (made by the first
/// file published; until then every path is 404).
pub fn router(root: &Path) -> axum::Router {
    axum::Router::new().fallback_service(
        ServeDir::new(root)
            .append_index_html_on_directories(false)
            .call_fallback_on_method_not_allowed(false),
    )
}
