//! Several databases in one server and several access tokens: each named database at `/NAME`
//! is its own store with its own id and endpoint; creating one on first use takes an admin
//! token; the open-database limit holds at and past it; the admin endpoints create, list and
//! drop; any of several tokens works, each client gets its own back, and replacing the set
//! takes effect on open connections.

use tuplekv_testkit::kv_connect as common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use bytes::Bytes;
use common::*;
use denokv_proto::datapath as pb;
use http_body_util::Full;
use hyper::Request;
use prost::Message;
use tokio::net::TcpListener;
use tuplekv_engine::Database;
use tuplekv_server::{
    AccessTokens, DatabaseHost, DatabaseName, Databases, ServerConfig, Uuid, router,
    router_with_databases, serve_with,
};

/// In-memory databases, each with a fixed id made from its creation order.
struct Host {
    config: ServerConfig,
    dbs: Mutex<BTreeMap<DatabaseName, (Uuid, Arc<Database>)>>,
}

impl DatabaseHost for Host {
    fn open(&self, name: &DatabaseName, create: bool) -> Result<Option<Router>, String> {
        let mut dbs = self.dbs.lock().expect("lock");
        if !dbs.contains_key(name) {
            if !create {
                return Ok(None);
            }
            let id = Uuid::from_u128(dbs.len() as u128 + 1);
            dbs.insert(name.clone(), (id, Arc::new(Database::in_memory())));
        }
        let (id, store) = dbs.get(name).expect("there now").clone();
        Ok(Some(router(store, self.config.with_database(name, id))))
    }

    fn list(&self) -> Result<Vec<DatabaseName>, String> {
        Ok(self.dbs.lock().expect("lock").keys().cloned().collect())
    }

    fn drop_database(&self, name: &DatabaseName) -> Result<bool, String> {
        Ok(self.dbs.lock().expect("lock").remove(name).is_some())
    }
}

const OTHER_TOKEN: &str = "second-token-abcdefgh";

struct Server {
    addr: std::net::SocketAddr,
    tokens: Arc<AccessTokens>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(create: bool, open_max: usize, existing: &[&str]) -> Server {
    let tokens = Arc::new(AccessTokens::new([TOKEN, OTHER_TOKEN]).expect("tokens"));
    let config = ServerConfig::with_access_tokens(Arc::clone(&tokens));
    let host = Host {
        config: config.clone(),
        dbs: Mutex::default(),
    };
    for name in existing {
        host.open(&DatabaseName::new(name).expect("name"), true)
            .expect("made");
    }
    let databases = Databases::new(host, Arc::clone(&tokens))
        .with_create_on_first_use(create)
        .with_open_max(open_max);
    let app = router_with_databases(
        router(Arc::new(Database::in_memory()), config.clone()),
        Arc::new(databases),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with(
        listener,
        app,
        config.serve_options(),
        async move {
            let _ = rx.await;
        },
    ));
    Server {
        addr,
        tokens,
        _stop: tx,
    }
}

async fn metadata_at(c: &mut Client, path: &str, token: &str) -> Reply {
    let req = Request::post(format!("http://{}{path}", c.addr))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from_static(
            br#"{"supportedVersions":[2,3]}"#,
        )))
        .expect("request");
    c.call(req).await
}

async fn data_at(c: &mut Client, path: &str, id: &str, method: &str, body: Vec<u8>) -> Reply {
    let req = Request::post(format!("http://{}{path}/v2/{method}", c.addr))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("x-denokv-version", "3")
        .header("x-denokv-database-id", id)
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    c.call(req).await
}

async fn admin(c: &mut Client, method: &str, path: &str, token: &str) -> Reply {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", c.addr))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    c.call(req).await
}

fn read_key(k: &[u8]) -> Vec<u8> {
    read_of(vec![get_range(k)]).encode_to_vec()
}

fn values(reply: &Reply) -> usize {
    let out: pb::SnapshotReadOutput = reply.decode();
    out.ranges[0].values.len()
}

#[tokio::test]
async fn a_named_database_is_its_own_store_with_its_own_id_and_endpoint() {
    let server = start(true, 8, &[]).await;
    let mut c = Client::h2(server.addr).await;
    let meta = metadata_at(&mut c, "/db2", TOKEN).await;
    assert_eq!(meta.status, 200, "{}", meta.text());
    let meta = meta.json();
    assert_eq!(meta["endpoints"][0]["url"], "/db2/v2");
    let id = meta["databaseId"].as_str().expect("an id").to_owned();
    assert_ne!(id, NIL_ID, "a named database has an id of its own");
    let write = write_of(vec![], vec![set(&key("only-in-db2"), bytes_value(b"x"))]);
    let out: pb::AtomicWriteOutput =
        data_at(&mut c, "/db2", &id, "atomic_write", write.encode_to_vec())
            .await
            .decode();
    assert_eq!(out.status, AW_SUCCESS);
    let in_db2 = data_at(
        &mut c,
        "/db2",
        &id,
        "snapshot_read",
        read_key(&key("only-in-db2")),
    )
    .await;
    assert_eq!(values(&in_db2), 1);
    let in_root = data_at(
        &mut c,
        "",
        NIL_ID,
        "snapshot_read",
        read_key(&key("only-in-db2")),
    )
    .await;
    assert_eq!(values(&in_root), 0, "the root database does not see it");
    // The root database's id does not reach the named one, nor the other way round.
    data_at(&mut c, "/db2", NIL_ID, "snapshot_read", read_key(&key("k")))
        .await
        .assert_error(400, "Invalid database id.");
    data_at(&mut c, "", &id, "snapshot_read", read_key(&key("k")))
        .await
        .assert_error(400, "Invalid database id.");
    // The version 1 endpoint is absolute and keeps the database's path.
    let req = Request::post(format!("http://{}/db2", server.addr))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Full::new(Bytes::from_static(
            br#"{"supportedVersions":[1]}"#,
        )))
        .expect("request");
    let v1 = c.call(req).await.json();
    assert_eq!(
        v1["endpoints"][0]["url"],
        format!("http://{}/db2/v2", server.addr)
    );
}

#[tokio::test]
async fn creating_on_first_use_takes_a_valid_token_and_is_off_by_default() {
    let server = start(true, 8, &[]).await;
    let mut c = Client::h2(server.addr).await;
    metadata_at(&mut c, "/fresh", "not-a-valid-token")
        .await
        .assert_error(
            404,
            "Database fresh not found. Create it with `tuplekv db create fresh`.",
        );
    let list = admin(&mut c, "GET", "/_tuplekv/databases", TOKEN).await;
    assert_eq!(
        list.json()["databases"],
        serde_json::json!([]),
        "nothing made"
    );
    assert_eq!(metadata_at(&mut c, "/fresh", TOKEN).await.status, 200);

    let closed = start(false, 8, &["exists"]).await;
    let mut c = Client::h2(closed.addr).await;
    assert_eq!(metadata_at(&mut c, "/exists", TOKEN).await.status, 200);
    assert_eq!(metadata_at(&mut c, "/missing", TOKEN).await.status, 404);
    // Paths that are not database names get the plain 404.
    for path in ["/Not-A-Name", "/_tuplekv", "/v2/unknown", "/a%2Fb"] {
        metadata_at(&mut c, path, TOKEN)
            .await
            .assert_error(404, "Resource not found.");
    }
}

#[tokio::test]
async fn the_open_database_limit_holds_at_and_past_it() {
    let server = start(true, 2, &[]).await;
    let mut c = Client::h2(server.addr).await;
    assert_eq!(metadata_at(&mut c, "/one", TOKEN).await.status, 200);
    assert_eq!(
        metadata_at(&mut c, "/two", TOKEN).await.status,
        200,
        "at the limit"
    );
    let past = metadata_at(&mut c, "/three", TOKEN).await;
    assert_eq!(past.status, 503, "{}", past.text());
    assert!(past.headers.contains_key("retry-after"));
    assert_eq!(
        metadata_at(&mut c, "/one", TOKEN).await.status,
        200,
        "the open ones still answer"
    );
    assert_eq!(
        admin(&mut c, "DELETE", "/_tuplekv/databases/two", TOKEN)
            .await
            .status,
        200
    );
    assert_eq!(
        metadata_at(&mut c, "/three", TOKEN).await.status,
        200,
        "a dropped one frees its place"
    );
}

#[tokio::test]
async fn the_admin_endpoints_create_list_and_drop_behind_the_token() {
    let server = start(false, 8, &[]).await;
    let mut c = Client::h1(server.addr).await;
    assert_eq!(
        admin(
            &mut c,
            "PUT",
            "/_tuplekv/databases/made",
            "wrong-token-123456"
        )
        .await
        .status,
        401
    );
    assert_eq!(
        admin(&mut c, "GET", "/_tuplekv/databases", "").await.status,
        401
    );
    assert_eq!(
        admin(&mut c, "PUT", "/_tuplekv/databases/made", TOKEN)
            .await
            .status,
        201
    );
    assert_eq!(
        admin(&mut c, "PUT", "/_tuplekv/databases/made", OTHER_TOKEN)
            .await
            .status,
        200,
        "created once; any valid token may ask"
    );
    let bad = admin(&mut c, "PUT", "/_tuplekv/databases/Bad.Name", TOKEN).await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    let list = admin(&mut c, "GET", "/_tuplekv/databases", TOKEN)
        .await
        .json();
    assert_eq!(
        list["databases"],
        serde_json::json!([{ "name": "made", "open": true }])
    );
    assert_eq!(metadata_at(&mut c, "/made", TOKEN).await.status, 200);
    assert_eq!(
        admin(&mut c, "DELETE", "/_tuplekv/databases/made", TOKEN)
            .await
            .status,
        200
    );
    assert_eq!(
        admin(&mut c, "DELETE", "/_tuplekv/databases/made", TOKEN)
            .await
            .status,
        404
    );
    assert_eq!(
        metadata_at(&mut c, "/made", TOKEN).await.status,
        404,
        "gone"
    );
}

#[tokio::test]
async fn any_of_several_tokens_works_and_a_replaced_set_applies_to_open_connections() {
    let server = start(false, 8, &[]).await;
    let mut c = Client::h2(server.addr).await;
    for token in [TOKEN, OTHER_TOKEN] {
        let meta = metadata_at(&mut c, "/", token).await;
        assert_eq!(meta.status, 200);
        assert_eq!(
            meta.json()["token"],
            token,
            "each client gets its own token back"
        );
    }
    server
        .tokens
        .replace([OTHER_TOKEN, "third-token-0123456"])
        .expect("a valid set");
    metadata_at(&mut c, "/", TOKEN)
        .await
        .assert_error(401, "Invalid access token.");
    let data = c.data("snapshot_read", read_key(&key("k"))).await;
    data.assert_error(401, "Invalid access token.");
    assert_eq!(
        metadata_at(&mut c, "/", "third-token-0123456").await.status,
        200,
        "the new token works on the same connection"
    );
}
