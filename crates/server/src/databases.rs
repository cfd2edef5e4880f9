//! Several databases in one server: a database per URL path (`http://host:port/NAME`, the
//! layout Deno's `DENO_KV_PATH_PREFIX` gives), next to the root database at `/`.
//!
//! A [`DatabaseHost`] knows where databases live (directories under a data root, or memory)
//! and opens, creates, lists and drops them; [`Databases`] keeps the open ones, opens one on
//! its first request, and creates one on first use when the operator allows it;
//! [`router_with_databases`] routes `/NAME` and `/NAME/v2/…` to it and serves the admin
//! endpoints `GET /_tuplekv/databases`, `PUT` and `DELETE /_tuplekv/databases/NAME`
//! (behind the root database's access tokens).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as PathParam, Request, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, put};
use tower_service::Service;

use crate::error::{ApiError, text};
use crate::limits::{DATABASE_NAME_LEN_MAX, DATABASES_OPEN_MAX};
use crate::{AccessTokens, app};

/// The path prefix of the admin endpoints (`_` cannot start a database name).
pub const ADMIN_PATH: &str = "/_tuplekv/databases";

/// Path segments that can never name a database: the root database's own endpoints and
/// the probes a server answers at the root.
/// (`default` is the root database's label in the metrics.)
pub const RESERVED_NAMES: [&str; 6] = ["v1", "v2", "healthz", "readyz", "metrics", "default"];

/// The name of a database served at `/NAME`: 1 to [`DATABASE_NAME_LEN_MAX`] characters of
/// `a-z`, `0-9`, `-` and `_`, starting with a letter or digit, and not one of
/// [`RESERVED_NAMES`]. Safe as a directory name and as a URL path segment.
///
/// ```
/// use tuplekv_server::DatabaseName;
///
/// assert_eq!(DatabaseName::new("tests-42").map(|n| n.to_string()), Ok("tests-42".into()));
/// assert!(DatabaseName::new("../etc").is_err());
/// assert!(DatabaseName::new("v2").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatabaseName(String);

/// Why a string is not a [`DatabaseName`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatabaseNameError {
    /// The name is empty.
    Empty,
    /// The name has more than [`DATABASE_NAME_LEN_MAX`] characters.
    TooLong {
        /// Its length, in bytes.
        len: usize,
    },
    /// The name holds a character other than `a-z`, `0-9`, `-`, `_`, or starts with `-`
    /// or `_`.
    BadCharacter {
        /// The first such character.
        found: char,
    },
    /// The name is one of [`RESERVED_NAMES`].
    Reserved,
}

impl std::fmt::Display for DatabaseNameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseNameError::Empty => f.write_str("a database name cannot be empty"),
            DatabaseNameError::TooLong { len } => write!(
                f,
                "a database name has at most {DATABASE_NAME_LEN_MAX} characters; this one has {len}"
            ),
            DatabaseNameError::BadCharacter { found } => write!(
                f,
                "a database name is made of a-z, 0-9, '-' and '_' and starts with a letter or \
                 digit; {found:?} is not allowed there"
            ),
            DatabaseNameError::Reserved => write!(
                f,
                "that name is reserved for the server's own paths ({})",
                RESERVED_NAMES.join(", ")
            ),
        }
    }
}

impl std::error::Error for DatabaseNameError {}

impl DatabaseName {
    /// Checks `name`.
    ///
    /// # Errors
    /// The rule it breaks (see [`DatabaseName`]).
    pub fn new(name: &str) -> Result<Self, DatabaseNameError> {
        if name.is_empty() {
            return Err(DatabaseNameError::Empty);
        }
        if name.len() > DATABASE_NAME_LEN_MAX {
            return Err(DatabaseNameError::TooLong { len: name.len() });
        }
        let allowed =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
        if let Some(found) = name.chars().find(|&c| !allowed(c)) {
            return Err(DatabaseNameError::BadCharacter { found });
        }
        if let Some(found) = name.chars().next().filter(|c| !c.is_ascii_alphanumeric()) {
            return Err(DatabaseNameError::BadCharacter { found });
        }
        if RESERVED_NAMES.contains(&name) {
            return Err(DatabaseNameError::Reserved);
        }
        Ok(DatabaseName(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The URL path the database is served at: `/NAME`.
    pub fn base_path(&self) -> String {
        format!("/{}", self.0)
    }
}

impl std::fmt::Display for DatabaseName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a server's named databases live: opens, creates, lists and drops them. Its
/// methods may block (they open files); [`Databases`] calls them off the runtime's workers.
///
/// A router a host returns serves one database at its [`DatabaseName::base_path`]: build it
/// with [`crate::router`] from a [`crate::ServerConfig`] given
/// [`crate::ServerConfig::with_database`].
pub trait DatabaseHost: Send + Sync + 'static {
    /// The router of database `name`, opened if it is not already; when it does not exist,
    /// created if `create`, else `Ok(None)`.
    ///
    /// # Errors
    /// Why it could not be opened or created (shown to the operator and, for a request, logged
    /// with a 500).
    fn open(&self, name: &DatabaseName, create: bool) -> Result<Option<Router>, String>;

    /// Every database there is, open or not, in name order.
    ///
    /// # Errors
    /// Why they could not be listed.
    fn list(&self) -> Result<Vec<DatabaseName>, String>;

    /// Closes database `name` and deletes it with all its data; `Ok(false)` when there was
    /// none. [`Databases`] has stopped routing requests to it before calling this.
    ///
    /// # Errors
    /// Why it could not be dropped (still in use, say); it then stays as it was.
    fn drop_database(&self, name: &DatabaseName) -> Result<bool, String>;
}

/// The named databases of a server: the open ones by name, and the [`DatabaseHost`] that
/// opens the rest.
pub struct Databases {
    host: Arc<dyn DatabaseHost>,
    open: std::sync::Mutex<HashMap<DatabaseName, Router>>,
    /// Held while a database is opened, created or dropped, so two first requests for one
    /// database do not open it twice.
    changing: tokio::sync::Mutex<()>,
    create_on_first_use: bool,
    admin_tokens: Arc<AccessTokens>,
    open_max: usize,
}

impl std::fmt::Debug for Databases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Databases")
            .field("open", &self.open_names())
            .field("create_on_first_use", &self.create_on_first_use)
            .field("open_max", &self.open_max)
            .finish_non_exhaustive()
    }
}

impl Databases {
    /// The databases of `host`; creating, dropping and listing them through the admin
    /// endpoints, and creating one on first use, take one of `admin_tokens` (the root
    /// database's tokens, typically). At most [`DATABASES_OPEN_MAX`] are open at once.
    pub fn new(host: impl DatabaseHost, admin_tokens: Arc<AccessTokens>) -> Self {
        Databases {
            host: Arc::new(host),
            open: std::sync::Mutex::default(),
            changing: tokio::sync::Mutex::new(()),
            create_on_first_use: false,
            admin_tokens,
            open_max: DATABASES_OPEN_MAX,
        }
    }

    /// Sets whether a request for a database that does not exist creates it (default: no,
    /// it gets 404). Either way only a request with one of the admin tokens creates one.
    #[must_use]
    pub fn with_create_on_first_use(mut self, create: bool) -> Self {
        self.create_on_first_use = create;
        self
    }

    /// Sets how many databases may be open at once (default [`DATABASES_OPEN_MAX`]; zero is
    /// raised to 1). A request that would open one more is answered 503.
    #[must_use]
    pub fn with_open_max(mut self, max: usize) -> Self {
        self.open_max = max.max(1);
        self
    }

    /// The names of the open databases, in order.
    pub fn open_names(&self) -> Vec<DatabaseName> {
        let mut names: Vec<_> = self.lock_open().keys().cloned().collect();
        names.sort();
        names
    }

    fn lock_open(&self) -> std::sync::MutexGuard<'_, HashMap<DatabaseName, Router>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_admin(&self, headers: &HeaderMap) -> bool {
        app::authorize(headers, &self.admin_tokens).is_ok()
    }

    /// The router of `name`: the open one, or opened now (created when allowed and the
    /// request carries an admin token).
    async fn router_for(
        &self,
        name: &DatabaseName,
        headers: &HeaderMap,
    ) -> Result<Router, ApiError> {
        if let Some(router) = self.lock_open().get(name) {
            return Ok(router.clone());
        }
        let _changing = self.changing.lock().await;
        if let Some(router) = self.lock_open().get(name) {
            return Ok(router.clone());
        }
        self.room_for_one_more(name)?;
        let opened = match self
            .call_host(name, |host, name| host.open(name, false))
            .await?
        {
            Some(router) => router,
            None if self.create_on_first_use && self.is_admin(headers) => self
                .call_host(name, |host, name| host.open(name, true))
                .await?
                .ok_or_else(ApiError::internal)?,
            None => return Err(no_such_database(name)),
        };
        tracing::info!(database = %name, "database opened");
        self.lock_open().insert(name.clone(), opened.clone());
        Ok(opened)
    }

    /// `Ok` when one more database may be opened; else the 503 that says why.
    fn room_for_one_more(&self, name: &DatabaseName) -> Result<(), ApiError> {
        if self.lock_open().len() < self.open_max {
            return Ok(());
        }
        Err(ApiError::busy(
            format!(
                "Too many databases open ({} at most): database {name} cannot be opened now.",
                self.open_max
            ),
            1,
        ))
    }

    async fn call_host<T: Send + 'static>(
        &self,
        name: &DatabaseName,
        f: impl FnOnce(&dyn DatabaseHost, &DatabaseName) -> Result<T, String> + Send + 'static,
    ) -> Result<T, ApiError> {
        let host = Arc::clone(&self.host);
        let owned = name.clone();
        let result = tokio::task::spawn_blocking(move || f(host.as_ref(), &owned))
            .await
            .map_err(|_| ApiError::internal())?;
        result.map_err(|e| {
            tracing::error!(database = %name, error = %e, "database host failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Database {name}: {e}"),
            )
        })
    }
}

fn no_such_database(name: &DatabaseName) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("Database {name} not found. Create it with `tuplekv db create {name}`."),
    )
}

/// The root database's `router` with the databases of `databases` at `/NAME` and the admin
/// endpoints under [`ADMIN_PATH`]. Paths that are not a valid database name get the root
/// router's 404.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use axum::Router;
/// use tuplekv_engine::Database;
/// use tuplekv_server::{
///     DatabaseHost, DatabaseName, Databases, ServerConfig, router, router_with_databases,
/// };
///
/// /// Every database in memory, made on demand.
/// struct InMemory(ServerConfig, std::sync::Mutex<Vec<DatabaseName>>);
///
/// impl DatabaseHost for InMemory {
///     fn open(&self, name: &DatabaseName, create: bool) -> Result<Option<Router>, String> {
///         let mut names = self.1.lock().unwrap();
///         if !names.contains(name) {
///             if !create {
///                 return Ok(None);
///             }
///             names.push(name.clone());
///         }
///         let config = self.0.with_database(name, tuplekv_server::Uuid::from_u128(1));
///         Ok(Some(router(Arc::new(Database::in_memory()), config)))
///     }
///     fn list(&self) -> Result<Vec<DatabaseName>, String> {
///         Ok(self.1.lock().unwrap().clone())
///     }
///     fn drop_database(&self, name: &DatabaseName) -> Result<bool, String> {
///         let mut names = self.1.lock().unwrap();
///         let before = names.len();
///         names.retain(|n| n != name);
///         Ok(names.len() < before)
///     }
/// }
///
/// let config = ServerConfig::new("a-long-secret-token").expect("a long enough token");
/// let host = InMemory(config.clone(), Default::default());
/// let databases = Databases::new(host, Arc::clone(config.access_tokens()))
///     .with_create_on_first_use(true);
/// let root = router(Arc::new(Database::in_memory()), config);
/// let app = router_with_databases(root, Arc::new(databases));
/// # let _ = app;
/// ```
pub fn router_with_databases(root: Router, databases: Arc<Databases>) -> Router {
    let named = Router::new()
        .route(ADMIN_PATH, get(list_databases))
        .route(
            &format!("{ADMIN_PATH}/{{name}}"),
            put(create_database).delete(drop_database),
        )
        .route("/{name}", any(dispatch))
        .route("/{name}/{*rest}", any(dispatch))
        .with_state(databases);
    root.merge(named)
}

/// Routes `/NAME…` to database NAME's router, with `/NAME` taken off the path.
async fn dispatch(State(databases): State<Arc<Databases>>, req: Request) -> Response {
    let path = req.uri().path();
    let rest_start = path[1..].find('/').map_or(path.len(), |i| i + 1);
    let Ok(name) = DatabaseName::new(&path[1..rest_start]) else {
        return ApiError::new(StatusCode::NOT_FOUND, text::NOT_FOUND).into_response();
    };
    let rest = match &path[rest_start..] {
        "" => "/",
        rest => rest,
    };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_owned(),
    };
    let mut router = match databases.router_for(&name, req.headers()).await {
        Ok(router) => router,
        Err(e) => return e.into_response(),
    };
    let (mut parts, body) = req.into_parts();
    let mut uri = parts.uri.into_parts();
    uri.path_and_query = path_and_query.parse().ok();
    parts.uri = match Uri::from_parts(uri) {
        Ok(uri) => uri,
        Err(_) => return ApiError::new(StatusCode::NOT_FOUND, text::NOT_FOUND).into_response(),
    };
    match router.call(Request::from_parts(parts, body)).await {
        Ok(res) => res,
        Err(never) => match never {},
    }
}

fn admin_only(databases: &Databases, headers: &HeaderMap) -> Result<(), ApiError> {
    app::authorize(headers, &databases.admin_tokens).map(|_| ())
}

fn parse_name(name: &str) -> Result<DatabaseName, ApiError> {
    DatabaseName::new(name).map_err(|e| ApiError::bad_request(format!("{e}.")))
}

/// `GET /_tuplekv/databases`: `{"databases": [{"name": …, "open": bool}, …]}`.
async fn list_databases(
    State(databases): State<Arc<Databases>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&databases, &headers)?;
    let all = databases
        .call_host(&DatabaseName("_list".to_owned()), |host, _| host.list())
        .await?;
    let open = databases.open_names();
    let list: Vec<_> = all
        .iter()
        .map(|name| serde_json::json!({ "name": name.as_str(), "open": open.contains(name) }))
        .collect();
    let json = serde_json::to_vec(&serde_json::json!({ "databases": list }))
        .map_err(|_| ApiError::internal())?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json,
    )
        .into_response())
}

/// `PUT /_tuplekv/databases/NAME`: 201 when created, 200 when it was already there.
async fn create_database(
    State(databases): State<Arc<Databases>>,
    PathParam(name): PathParam<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&databases, &headers)?;
    let name = parse_name(&name)?;
    let _changing = databases.changing.lock().await;
    let existed = databases.lock_open().contains_key(&name)
        || databases
            .call_host(&name, |host, name| {
                host.list().map(|all| all.contains(name))
            })
            .await?;
    if existed {
        return Ok((StatusCode::OK, format!("Database {name} exists.\n")).into_response());
    }
    databases.room_for_one_more(&name)?;
    let router = databases
        .call_host(&name, |host, name| host.open(name, true))
        .await?
        .ok_or_else(ApiError::internal)?;
    databases.lock_open().insert(name.clone(), router);
    tracing::info!(database = %name, "database created");
    Ok((StatusCode::CREATED, format!("Database {name} created.\n")).into_response())
}

/// `DELETE /_tuplekv/databases/NAME`: 200 when dropped, 404 when there was none.
async fn drop_database(
    State(databases): State<Arc<Databases>>,
    PathParam(name): PathParam<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin_only(&databases, &headers)?;
    let name = parse_name(&name)?;
    let _changing = databases.changing.lock().await;
    let router = databases.lock_open().remove(&name);
    // The router (and the store it holds) goes before the host closes the store.
    drop(router);
    match databases
        .call_host(&name, |host, name| host.drop_database(name))
        .await
    {
        Ok(true) => {
            tracing::info!(database = %name, "database dropped");
            Ok((StatusCode::OK, format!("Database {name} dropped.\n")).into_response())
        }
        Ok(false) => Err(no_such_database(&name)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_are_checked_at_and_past_the_length_limit() {
        let at = "a".repeat(DATABASE_NAME_LEN_MAX);
        assert!(DatabaseName::new(&at).is_ok());
        assert_eq!(
            DatabaseName::new(&format!("{at}a")),
            Err(DatabaseNameError::TooLong {
                len: DATABASE_NAME_LEN_MAX + 1
            })
        );
        assert_eq!(DatabaseName::new(""), Err(DatabaseNameError::Empty));
    }

    #[test]
    fn database_names_refuse_paths_capitals_and_reserved_words() {
        for (bad, found) in [
            ("..", '.'),
            ("a/b", '/'),
            ("Tests", 'T'),
            ("-x", '-'),
            ("_admin", '_'),
            ("a b", ' '),
            ("é", 'é'),
        ] {
            assert_eq!(
                DatabaseName::new(bad),
                Err(DatabaseNameError::BadCharacter { found }),
                "{bad:?}"
            );
        }
        for reserved in RESERVED_NAMES {
            assert_eq!(
                DatabaseName::new(reserved),
                Err(DatabaseNameError::Reserved)
            );
        }
        for good in ["db2", "0", "tests_1-a", "v3"] {
            assert!(DatabaseName::new(good).is_ok(), "{good}");
        }
    }
}
