//! An axum + tokio service on tuplekv, the way issue 35's user wrote one: users with a unique
//! email, gapless invoice numbers, order codes, and a `/health` probe that never touches the
//! store.
//!
//! | route | what it does |
//! |---|---|
//! | `POST /users {email, name}` | a [`User`] in a [`Collection`] with a unique `email` index: `201 {"id"}`, `409` for an email taken |
//! | `GET /users/by-email/{email}` | the user with that email, or `404` |
//! | `POST /invoices {customer, amount}` | the next number of the gapless sequence `INV`, committed with its [`Invoice`]: `201 {"code", "number"}` |
//! | `GET /invoices/{number}` | the invoice with that number, or `404` |
//! | `POST /orders {customer}` | a code of the fast sequence `ORD`, and the [`Order`] under it: `201 {"code"}` |
//! | `GET /health` | `200 ok`, without touching the store (what a load balancer probes) |
//!
//! The store is any [`Store`]: an embedded [`tuplekv_engine::Database`] (in memory, or durable
//! in a directory) or a [`tuplekv_remote::RemoteStore`] shared with other instances through
//! `tuplekv serve` ([`StoreChoice`]). A failure of the store that a client may retry (the
//! remote server cannot be reached, or a write's outcome is unknown) is a `503`.
//!
//! # Two ways to call tuplekv from a handler
//! tuplekv's blocking API must not run on the runtime's worker threads: a commit that waits
//! for its sync, or a remote request that waits for a server that went away (up to
//! [`tuplekv_remote::RemoteOptions::retry_for`]), would hold the worker, and with every worker
//! held even `/health` stops answering. Each handler therefore has two bodies, side by side,
//! chosen by [`Mode`]:
//! - [`Mode::Blocking`]: the blocking API inside [`tokio::task::spawn_blocking`];
//! - [`Mode::Async`]: the `_async` API, awaited on the worker.
//!
//! `tests/service.rs` drives both with 64 clients on the embedded and the remote store and
//! checks the invariants (invoice numbers exactly `1..=n`, one `201` per email, distinct
//! order codes), then stops the remote server and checks that `/health` still answers at
//! once while store requests wait and fail with `503`. The binary `service-load`
//! (`cargo xtask bench service`) measures both modes on each store.
//!
//! ```no_run
//! use tuplekv_example_service::{App, Mode, StoreChoice, serve};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = tuplekv_engine::Database::in_memory();
//! let app = tokio::task::spawn_blocking(move || App::open(store, Mode::Async)).await??;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("listening on {}", listener.local_addr()?);
//! serve(app, listener, std::future::pending()).await?;
//! # let _ = StoreChoice::Memory;
//! # Ok(())
//! # }
//! ```

pub mod client;
pub mod kv;
mod running;
mod store;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tuplekv_engine::codec::encode_key;
use tuplekv_engine::{Store, key};
use tuplekv_index::Collection;
use tuplekv_sequence::{
    FastSequence, GaplessSequence, Mode as SequenceMode, SequenceOptions, Sequences,
};

#[allow(unused_imports, reason = "until the async API lands on main")]
pub use running::RunningService;
pub use store::{AnyStore, StoreChoice, StoreError};

/// The gapless sequence of invoice numbers.
pub const INVOICES: &str = "INV";
/// The fast sequence of order codes.
pub const ORDERS: &str = "ORD";
/// The fast sequence user ids are drawn from.
pub const USER_IDS: &str = "USR";
/// The digits of an invoice code (`INV000001`); larger numbers widen it.
pub const INVOICE_WIDTH: usize = 6;

/// What a [`Store`] needs to back the service.
pub trait ServiceStore: Store + Clone + 'static {}

impl<S: Store + Clone + 'static> ServiceStore for S {}

/// How handlers call tuplekv.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The blocking API, each call inside [`tokio::task::spawn_blocking`]: today's workaround.
    Blocking,
    /// The async API (`insert_async`, `next_async`, `commit_async`, …), awaited on the worker.
    Async,
}

impl Mode {
    /// Both modes.
    pub const ALL: [Mode; 2] = [Mode::Blocking, Mode::Async];

    /// `blocking` or `async`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Blocking => "blocking",
            Mode::Async => "async",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "blocking" => Ok(Mode::Blocking),
            "async" => Ok(Mode::Async),
            other => Err(format!("unknown mode `{other}` (blocking or async)")),
        }
    }
}

/// A user: its id is a number of the fast sequence [`USER_IDS`], its email unique.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The primary key.
    pub id: u64,
    /// Unique among users.
    pub email: String,
    /// Any name.
    pub name: String,
}

/// An invoice, stored as JSON under `["invoices", code]` in the commit that takes its number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invoice {
    /// Its code, `INV000042`.
    pub code: String,
    /// Who pays.
    pub customer: String,
    /// How much, in cents.
    pub amount: u64,
}

/// An order, stored as JSON under `["orders", code]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// Its code, `ORD042`.
    pub code: String,
    /// Who ordered.
    pub customer: String,
}

/// The body of `POST /users`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewUser {
    /// The email, unique among users.
    pub email: String,
    /// The name.
    pub name: String,
}

/// The body of `POST /invoices`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewInvoice {
    /// Who pays.
    pub customer: String,
    /// How much, in cents.
    pub amount: u64,
}

/// The body of `POST /orders`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewOrder {
    /// Who orders.
    pub customer: String,
}

/// The service's state: its collection and sequence handles on one store (one set per
/// instance; handles are shared by every request).
pub struct App<S: Store> {
    mode: Mode,
    store: S,
    users: Collection<User, S>,
    user_ids: FastSequence<S>,
    invoices: GaplessSequence<S>,
    orders: FastSequence<S>,
}

impl<S: Store> std::fmt::Debug for App<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// Why the service could not open its collection and sequences.
#[derive(Debug)]
pub enum OpenError {
    /// The users collection.
    Collection(tuplekv_index::Error),
    /// A sequence.
    Sequence(tuplekv_sequence::Error),
}

impl std::error::Error for OpenError {}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Collection(e) => write!(f, "opening the users collection: {e}"),
            OpenError::Sequence(e) => write!(f, "opening a sequence: {e}"),
        }
    }
}

impl<S: ServiceStore> App<S> {
    /// Opens the users collection and creates (idempotently) and opens the sequences on
    /// `store`. Blocking: call it before the runtime, or inside `spawn_blocking`.
    ///
    /// # Errors
    /// The store's, or a sequence created before with other options.
    pub fn open(store: S, mode: Mode) -> Result<App<S>, OpenError> {
        let users = Collection::builder("users", |u: &User| key![u.id])
            .unique("email", |u| Some(key![u.email.clone()]))
            .open(store.clone())
            .map_err(OpenError::Collection)?;
        let seqs = Sequences::new(store.clone());
        let gapless = SequenceOptions {
            mode: SequenceMode::Gapless,
            width: INVOICE_WIDTH,
            ..SequenceOptions::default()
        };
        let fast = SequenceOptions::default();
        let opened = (|| {
            seqs.create(INVOICES, gapless)?;
            seqs.create(ORDERS, fast.clone())?;
            seqs.create(USER_IDS, fast)?;
            Ok(App {
                mode,
                users,
                user_ids: seqs.fast(USER_IDS)?,
                invoices: seqs.gapless(INVOICES)?,
                orders: seqs.fast(ORDERS)?,
                store,
            })
        })();
        opened.map_err(OpenError::Sequence)
    }

    /// The mode its handlers run in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The axum router of the service.
    pub fn router(self) -> Router {
        Router::new()
            .route("/health", get(health))
            .route("/users", post(create_user::<S>))
            .route("/users/by-email/{email}", get(user_by_email::<S>))
            .route("/invoices", post(create_invoice::<S>))
            .route("/invoices/{number}", get(invoice::<S>))
            .route("/orders", post(create_order::<S>))
            .with_state(Arc::new(self))
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits for requests in flight.
///
/// # Errors
/// As [`axum::serve()`].
pub async fn serve<S: ServiceStore>(
    app: App<S>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    // Small request/response pairs on kept-alive connections: no Nagle delay.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app.router())
        .with_graceful_shutdown(shutdown)
        .await
}

type Shared<S> = State<Arc<App<S>>>;

/// Runs `f` on the blocking pool with the app: how a handler of [`Mode::Blocking`] calls
/// tuplekv.
async fn blocking<S, R>(
    app: &Arc<App<S>>,
    f: impl FnOnce(&App<S>) -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError>
where
    S: ServiceStore,
    R: Send + 'static,
{
    let app = Arc::clone(app);
    tokio::task::spawn_blocking(move || f(&app))
        .await
        .map_err(|e| ApiError::Internal(format!("the handler's blocking task failed: {e}")))?
}

async fn health() -> &'static str {
    "ok"
}

async fn create_user<S: ServiceStore>(
    State(app): Shared<S>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let NewUser { email, name } = parse(&body)?;
    let id = match app.mode {
        Mode::Blocking => {
            blocking(&app, move |app| {
                let user = User {
                    id: app.user_ids.next()?.number(),
                    email,
                    name,
                };
                app.users.insert(&user)?;
                Ok(user.id)
            })
            .await?
        }
        Mode::Async => {
            let user = User {
                id: app.user_ids.next_async().await?.number(),
                email,
                name,
            };
            app.users.insert_async(&user).await?;
            user.id
        }
    };
    Ok(created(&serde_json::json!({ "id": id })))
}

async fn user_by_email<S: ServiceStore>(
    State(app): Shared<S>,
    Path(email): Path<String>,
) -> Result<Response, ApiError> {
    let email = key![email];
    let found = match app.mode {
        Mode::Blocking => blocking(&app, move |app| Ok(app.users.get_by("email", &email)?)).await?,
        Mode::Async => app.users.get_by_async("email", &email).await?,
    };
    let (_, user) = found.ok_or(ApiError::NotFound)?;
    Ok(json(StatusCode::OK, &user))
}

async fn create_invoice<S: ServiceStore>(
    State(app): Shared<S>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let NewInvoice { customer, amount } = parse(&body)?;
    // The record is built for the code the store gives it: the code goes in verbatim (a key
    // part and a JSON string), so the store numbers the commit itself.
    let build = move |code: &str, record: &mut tuplekv_sequence::Record| {
        let invoice = Invoice {
            code: code.to_owned(),
            customer: customer.clone(),
            amount,
        };
        let bytes = serde_json::to_vec(&invoice).unwrap_or_default();
        let at = key!["invoices", code];
        record.check(&at, None).set(&at, bytes);
    };
    let (code, number) = match app.mode {
        Mode::Blocking => {
            blocking(&app, move |app| {
                let issued = app.invoices.next_coded(build)?;
                Ok((issued.code(), issued.number()))
            })
            .await?
        }
        Mode::Async => {
            let issued = app.invoices.next_coded_async(build).await?;
            (issued.code(), issued.number())
        }
    };
    Ok(created(
        &serde_json::json!({ "code": code, "number": number }),
    ))
}

async fn invoice<S: ServiceStore>(
    State(app): Shared<S>,
    Path(number): Path<u64>,
) -> Result<Response, ApiError> {
    let at = key!["invoices", app.invoices.format().format(number)];
    let entry = match app.mode {
        Mode::Blocking => {
            blocking(&app, move |app| {
                Ok(app.store.get_latest_raw(&encode_key(&at))?)
            })
            .await?
        }
        Mode::Async => app.store.get_async(&at).await?,
    };
    let entry = entry.ok_or(ApiError::NotFound)?;
    let bytes = entry
        .value
        .as_bytes()
        .ok_or_else(|| ApiError::Internal("not bytes".into()))?;
    Ok(json_bytes(StatusCode::OK, bytes.to_vec()))
}

async fn create_order<S: ServiceStore>(
    State(app): Shared<S>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let NewOrder { customer } = parse(&body)?;
    let code = match app.mode {
        Mode::Blocking => {
            blocking(&app, move |app| {
                let code = app.orders.next()?.code();
                committed(app.store.commit(order_write(&app.store, &code, customer))?)?;
                Ok(code)
            })
            .await?
        }
        Mode::Async => {
            let code = app.orders.next_async().await?.code();
            committed(
                app.store
                    .commit_async(order_write(&app.store, &code, customer))
                    .await?,
            )?;
            code
        }
    };
    Ok(created(&serde_json::json!({ "code": code })))
}

/// The write of an order: its record under `["orders", code]`, which must be absent.
fn order_write<S: Store>(store: &S, code: &str, customer: String) -> tuplekv_engine::AtomicWrite {
    let order = Order {
        code: code.to_owned(),
        customer,
    };
    let at = key!["orders", code];
    let bytes = serde_json::to_vec(&order).unwrap_or_default();
    store
        .atomic()
        .check(&at, None)
        .set(&at, bytes)
        .as_write()
        .clone()
}

/// An order's commit fails its check only if its code was used before: never, for a fast
/// sequence's code.
fn committed(result: tuplekv_engine::CommitResult) -> Result<(), ApiError> {
    if result.is_committed() {
        Ok(())
    } else {
        Err(ApiError::Internal("the order code was used before".into()))
    }
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(e.to_string()))
}

fn created(value: &serde_json::Value) -> Response {
    json(StatusCode::CREATED, value)
}

fn json(status: StatusCode, value: &impl Serialize) -> Response {
    json_bytes(status, serde_json::to_vec(value).unwrap_or_default())
}

fn json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// What a handler answers instead of its result.
#[derive(Debug)]
pub enum ApiError {
    /// `400`: the body is not the JSON the route takes.
    BadRequest(String),
    /// `404`.
    NotFound,
    /// `409`: the email is taken.
    Conflict(String),
    /// `503`: the store cannot be reached, or a write's outcome is unknown; retry later.
    Unavailable(String),
    /// `500`: anything else.
    Internal(String),
}

impl ApiError {
    /// The status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match self {
            ApiError::NotFound => "not found".to_owned(),
            ApiError::BadRequest(m)
            | ApiError::Conflict(m)
            | ApiError::Unavailable(m)
            | ApiError::Internal(m) => m,
        };
        json(status, &serde_json::json!({ "error": message }))
    }
}

impl From<tuplekv_engine::Error> for ApiError {
    fn from(e: tuplekv_engine::Error) -> ApiError {
        use tuplekv_engine::Error as E;
        match e {
            E::Unavailable { .. }
            | E::OutcomeUnknown { .. }
            | E::SnapshotExpired { .. }
            | E::TransactionConflict { .. } => ApiError::Unavailable(e.to_string()),
            e => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<tuplekv_index::Error> for ApiError {
    fn from(e: tuplekv_index::Error) -> ApiError {
        use tuplekv_index::Error as E;
        match e {
            E::UniqueViolation { .. } | E::AlreadyExists { .. } => {
                ApiError::Conflict(e.to_string())
            }
            E::OutcomeUnknown { .. } => ApiError::Unavailable(e.to_string()),
            E::Store(e) => e.into(),
            e => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<tuplekv_sequence::Error> for ApiError {
    fn from(e: tuplekv_sequence::Error) -> ApiError {
        use tuplekv_sequence::Error as E;
        match e {
            E::Store(e) => e.into(),
            E::Contention { .. } => ApiError::Unavailable(e.to_string()),
            e => ApiError::Internal(e.to_string()),
        }
    }
}
