//! The metadata exchange (`POST /`): version negotiation before authentication, denokv's error
//! texts, and the reply's shape for versions 1, 2 and 3.

use tuplekv_testkit::kv_connect as common;

use bytes::Bytes;
use common::{TOKEN, TestServer};
use http_body_util::Full;
use hyper::Request;

const ALL: &str = r#"{"supportedVersions":[1,2,3]}"#;

#[tokio::test]
async fn metadata_offers_version_3_with_one_strong_relative_endpoint() {
    let server = TestServer::in_memory().spawn().await;
    let reply = server.h2().await.metadata(TOKEN, ALL).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.headers["content-type"], "application/json");
    let json = reply.json();
    assert_eq!(json["version"], 3);
    assert_eq!(json["databaseId"], common::NIL_ID);
    assert_eq!(
        json["endpoints"],
        serde_json::json!([{"url": "/v2", "consistency": "strong"}])
    );
    assert_eq!(json["token"], TOKEN);
    let expires = json["expiresAt"].as_str().expect("expiresAt");
    let expires = chrono::DateTime::parse_from_rfc3339(expires).expect("RFC 3339");
    let ahead = expires.signed_duration_since(chrono::Utc::now());
    assert!(
        ahead > chrono::Duration::hours(23) && ahead <= chrono::Duration::hours(24),
        "{ahead}"
    );
    server.stop().await;
}

#[tokio::test]
async fn metadata_picks_version_2_when_3_is_not_offered() {
    let server = TestServer::in_memory().spawn().await;
    let reply = server
        .h1()
        .await
        .metadata(TOKEN, r#"{"supportedVersions":[2]}"#)
        .await;
    assert_eq!(reply.json()["version"], 2);
    assert_eq!(reply.json()["endpoints"][0]["url"], "/v2");
    server.stop().await;
}

#[tokio::test]
async fn metadata_version_1_gets_an_absolute_endpoint_url_from_the_host() {
    let server = TestServer::in_memory().spawn().await;
    for mut client in [server.h1().await, server.h2().await] {
        let reply = client.metadata(TOKEN, r#"{"supportedVersions":[1]}"#).await;
        assert_eq!(reply.json()["version"], 1, "{}", reply.text());
        assert_eq!(
            reply.json()["endpoints"][0]["url"],
            format!("http://{}/v2", server.addr)
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn metadata_without_a_common_version_is_refused_before_the_token_is_looked_at() {
    let server = TestServer::in_memory().spawn().await;
    let reply = server
        .h2()
        .await
        .metadata("wrong", r#"{"supportedVersions":[4,5]}"#)
        .await;
    reply.assert_error(
        400,
        "The server could not negotiate a protocol version. The server requires protocol version 2 or 3.",
    );
    server.stop().await;
}

#[tokio::test]
async fn metadata_without_a_json_body_needs_a_newer_client() {
    let server = TestServer::in_memory().spawn().await;
    let mut client = server.h2().await;
    let text = "The server requires at least protocol version 2. Use Deno 1.38.0 or newer.";
    client.metadata(TOKEN, "").await.assert_error(400, text);
    client.metadata(TOKEN, "{").await.assert_error(400, text);
    client
        .metadata(TOKEN, r#"{"versions":[3]}"#)
        .await
        .assert_error(400, text);
    server.stop().await;
}

#[tokio::test]
async fn metadata_with_a_wrong_token_is_401() {
    let server = TestServer::in_memory().spawn().await;
    let mut client = server.h2().await;
    client
        .metadata("not-the-token", ALL)
        .await
        .assert_error(401, "Invalid access token.");
    // A prefix of the token is not the token.
    client
        .metadata(&TOKEN[..TOKEN.len() - 1], ALL)
        .await
        .assert_error(401, "Invalid access token.");
    server.stop().await;
}

#[tokio::test]
async fn metadata_auth_scheme_is_bearer_in_any_case_and_else_malformed_or_invalid() {
    let server = TestServer::in_memory().spawn().await;
    let mut client = server.h1().await;
    let send = |auth: Option<&str>| {
        let mut b = Request::post(format!("http://{}/", server.addr));
        if let Some(auth) = auth {
            b = b.header("authorization", auth);
        }
        b.body(Full::new(Bytes::from_static(ALL.as_bytes())))
            .expect("request")
    };
    let ok = client.call(send(Some(&format!("bEaReR {TOKEN}")))).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    client
        .call(send(None))
        .await
        .assert_error(401, "Malformed authorization header.");
    client
        .call(send(Some(TOKEN)))
        .await
        .assert_error(401, "Malformed authorization header.");
    client
        .call(send(Some(&format!("Basic {TOKEN}"))))
        .await
        .assert_error(401, "Invalid access token.");
    server.stop().await;
}
