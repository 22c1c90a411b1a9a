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

//!
//! Every request is logged (target `ironic::image_server`: the client, the method, the
//! status, the first folder of the path and a digest of the whole path, which names a
//! file without showing a name that guards a token), at INFO but for parts of a file
//! (206: a BMC reads an ISO in many), which are at DEBUG. Connections are bounded in
//! number and lifetime (`[deploy] http_max_connections`, `http_connection_lifetime`):
//! a slow reader holds its connection, not the server.

use std::path::Path;

use axum::extract::ConnectInfo;
use sha2::Digest;
use tower_http::services::ServeDir;

/// The image server's routes: every path is a file under `root` (made by the first
/// file published; until then every path is 404).
pub fn router(root: &Path) -> axum::Router {
    axum::Router::new()
        .fallback_service(
            ServeDir::new(root)
                .append_index_html_on_directories(false)
                .call_fallback_on_method_not_allowed(false),
        )
        .layer(axum::middleware::from_fn(access_log))
}

/// One line per request (see the module's doc).
async fn access_log(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.to_string())
        .unwrap_or_default();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let folder = path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default()
        .chars()
        .take(64)
        .collect::<String>();
    let digest = format!("{:x}", sha2::Sha256::digest(path.as_bytes()));
    let folder = ironic_model::secrets::log_safe(&folder);
    if status == 206 {
        tracing::debug!(target: "ironic::image_server", peer, %method, status, %folder, path_sha256 = &digest[..16], "image server request");
    } else {
        tracing::info!(target: "ironic::image_server", peer, %method, status, %folder, path_sha256 = &digest[..16], "image server request");
    }
    resp
}
