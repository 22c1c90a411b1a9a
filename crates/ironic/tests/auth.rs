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
    let roles = dir.join("roles.toml");
    std::fs::write(
        &roles,
        "[users.admin]\nroles = [\"admin\"]\n[users.ops]\nroles = [\"reader\"]\n",
    )
    .expect("write");
    let f = file.clone();
    let s = common::start_with(common::Backend::Sqlite, move |c| {
        c.api.auth_strategy = AuthStrategy::HttpBasic;
        c.api.http_basic_auth_user_file = Some(f);
        c.api.http_basic_roles_file = Some(roles);
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
    // The ramdisk agent's routes are public too (the agent has no credentials); from
    // 1.22, and the agent's token guards the heartbeat.
    let r = get(None, "/v1/lookup").await;
    assert_eq!(r.status, 400, "reaches the handler: {}", r.body);
    let r = s
        .raw(
            "GET",
            "/v1/lookup?addresses=52:54:00:00:00:01",
            &[("X-OpenStack-Ironic-API-Version", "1.62".to_string())],
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "Resource could not be found.".into())
    );
    assert_eq!(get(None, "/v1/lookup/x").await.status, 401);
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

/// Failed logins are limited per (user name, client address) pair and per address: past
/// the limit that client gets 429 with `Retry-After` (even with the right password) until
/// the window ends, and no password is checked meanwhile; the same user from another
/// address is not locked out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_are_limited() {
    let dir = std::env::temp_dir().join(format!("ironic-auth-{}", uuid_like()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("htpasswd");
    std::fs::write(&file, entry("admin", "s3cret")).expect("write");
    let roles = dir.join("roles.toml");
    std::fs::write(&roles, "[users.admin]\nroles = [\"admin\"]\n").expect("write");
    let s = common::start_with(common::Backend::Sqlite, move |c| {
        c.api.auth_strategy = AuthStrategy::HttpBasic;
        c.api.http_basic_auth_user_file = Some(file);
        c.api.http_basic_roles_file = Some(roles);
        c.api.max_failed_logins = 3;
        c.api.max_failed_logins_per_address = 5;
        c.api.failed_login_window = 600;
    })
    .await;
    let get_from = |from: Option<std::net::IpAddr>, auth: String| {
        let s = &s;
        async move {
            let h = vec![
                ("X-OpenStack-Ironic-API-Version", "1.51".to_string()),
                ("Authorization", auth),
            ];
            s.raw_from(from, "GET", "/v1/nodes", &h, None).await
        }
    };
    let get = |auth: String| get_from(None, auth);
    let elsewhere: std::net::IpAddr = "127.0.0.2".parse().expect("ip");
    assert_eq!(get(basic("admin", "s3cret")).await.status, 200);
    for _ in 0..3 {
        assert_eq!(get(basic("admin", "guess")).await.status, 401);
    }
    let r = get(basic("admin", "s3cret")).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let wait: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!(wait > 0 && wait <= 600, "{wait}");
    assert!(
        r.fault().starts_with("Too many failed logins"),
        "{}",
        r.fault()
    );
    // The user is not locked out for everyone: from another address it logs in.
    let r = get_from(Some(elsewhere), basic("admin", "s3cret")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Another user from the first address is not refused until the address has had
    // five failures; then every user from it waits.
    assert_eq!(get(basic("someone", "x")).await.status, 401);
    assert_eq!(get(basic("someone-else", "x")).await.status, 401);
    assert_eq!(get(basic("a-third", "x")).await.status, 429);
    assert_eq!(
        get_from(Some(elsewhere), basic("admin", "s3cret"))
            .await
            .status,
        200
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
