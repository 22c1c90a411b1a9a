//! `ironic-api`: see `ironic::cli` and docs/operations.md.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    ironic::cli::run(ironic::Role::Api).await
}
