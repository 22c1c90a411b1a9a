//! `ironic-oneview migrate-to-dynamic`: see `ironic::oneview_migrate` and docs/oneview.md.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    ironic::oneview_migrate::main_with(std::env::args().collect()).await
}
