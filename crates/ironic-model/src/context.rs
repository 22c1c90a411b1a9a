//! Who asked: what travels with every conductor call, whatever the transport.

/// Who asked, carried with every call for logs and traces.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub request_id: String,
    /// 0 for the first attempt; more when the caller repeats a call whose conductor
    /// died mid-call (a call that is safe to repeat, `ironic_rpc::Call::retry_safe`):
    /// the handler then recognises what the earlier attempt may have done.
    pub attempt: u32,
}
