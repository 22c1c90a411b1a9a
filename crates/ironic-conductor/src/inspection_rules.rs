//! The conductor's side of the inspection rules engine (`ironic-rules`): the
//! `api-call` action's HTTP client and timer, and the built-in rules file read from
//! disk. The engine itself, and where inspection runs it, are elsewhere
//! (`provision/inspecting.rs` `run_inspection_rules`).

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use ironic_drivers::http_get::GetClient;
use ironic_model::inspection_rule::InspectionRule;
use ironic_model::node::JsonObject;
use ironic_rules::builtin::BuiltInError;
use ironic_rules::{ApiCaller, CallError, CallFuture};

/// The `api-call` action's HTTP client: built at the first rule run of the process
/// (its TLS roots are not free), then shared, as a hyper client pools its connections.
pub(crate) fn http() -> &'static HttpCaller {
    static HTTP: OnceLock<HttpCaller> = OnceLock::new();
    HTTP.get_or_init(|| HttpCaller(GetClient::new()))
}

/// The engine's IO through the drivers' outbound GET client and tokio's timer.
pub(crate) struct HttpCaller(GetClient);

impl ApiCaller for HttpCaller {
    fn get<'a>(
        &'a self,
        url: &'a str,
        headers: &'a JsonObject,
        timeout: Duration,
    ) -> CallFuture<'a, Result<u16, CallError>> {
        Box::pin(async move {
            self.0
                .status(url, headers, timeout)
                .await
                // Its text, which the rule's failure message quotes.
                .map_err(|e| CallError::Connection(e.to_string()))
        })
    }

    fn pause(&self, d: Duration) -> CallFuture<'_, ()> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// `[inspection_rules] built_in_rules`: the rules of the file at `path`, read anew on
/// every inspection so that an edit needs no restart; any problem with the file is the
/// reason the inspection fails.
pub(crate) fn built_in(path: &Path) -> Result<Vec<InspectionRule>, BuiltInError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| BuiltInError::Read {
        shown: shown.clone(),
        error,
    })?;
    ironic_rules::builtin::parse(&text, &shown)
}
