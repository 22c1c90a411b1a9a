#![allow(clippy::unwrap_used)]
//! `http_basic` authentication against an htpasswd file with bcrypt entries.

mod common;

use base64::Engine;
use ironic_config::AuthStrategy;

fn basic(user: &str, pw: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"))
    )
}

fn entry(user: &str, pw: &str) -> String {
    let h = bcrypt::hash(pw, 4).expect("bcrypt");
    format!("{user}:{}\n", h.replacen("$2b$", "$2y$", 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_basic_guards_everything_but_discovery() {
    let dir = std::env::temp_dir().join(format!("ironic-auth-{}", uuid_like()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("htpasswd");
    std::fs::write(&file, format!("# operators\n{}", entry("admin", "s3cret"))).expect("write");
    let f = file.clone();
    let s = common::start_with(common::Backend::Sqlite, move |c| {
        c.api.auth_strategy = AuthStrategy::HttpBasic;
        c.api.http_basic_auth_user_file = Some(f);
    })
    .await;
    let get = |auth: Option<String>, path: &'static str| {
        let s = &s;
        async move {
            let mut h = vec![("X-OpenStack-Ironic-API-Version", "1.51".to_string())];
            if let Some(a) = auth {
                h.push(("Authorization", a));
            }
            s.raw("GET", path, &h, None).await
        }
    };
    assert_eq!(get(None, "/").await.status, 200, "discovery is public");
    assert_eq!(get(None, "/v1").await.status, 200);
    let r = get(None, "/v1/nodes").await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"Baremetal API\"")
    );
    assert_eq!(r.fault(), "Authentication required");
    assert_eq!(
        get(Some(basic("admin", "wrong")), "/v1/nodes").await.status,
        401
    );
    assert_eq!(
        get(Some(basic("nobody", "s3cret")), "/v1/nodes")
            .await
            .status,
        401
    );
    assert_eq!(get(Some("Basic !!!".into()), "/v1/nodes").await.status, 401);
    assert_eq!(
        get(Some(basic("admin", "s3cret")), "/v1/nodes")
            .await
            .status,
        200
    );
    assert_eq!(
        get(Some(basic("admin", "s3cret")), "/v1/nodes")
            .await
            .status,
        200,
        "cached"
    );
    // The file is re-read when it changes: a new user gets in, a removed one is out.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&file, entry("ops", "pw2")).expect("rewrite");
    let mtime = std::time::SystemTime::now() + std::time::Duration::from_secs(2);
    let _ = std::fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| f.set_modified(mtime));
    assert_eq!(
        get(Some(basic("ops", "pw2")), "/v1/nodes").await.status,
        200
    );
    assert_eq!(
        get(Some(basic("admin", "s3cret")), "/v1/nodes")
            .await
            .status,
        401
    );
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    )
}
