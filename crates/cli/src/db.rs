//! `tuplekv db create|list|drop`: the named databases a server serves at `/NAME`, under a
//! data root (`--databases ROOT`, also while a server runs on it, except `drop`) or through
//! a running server (`--url URL`, its admin endpoints).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use tuplekv_server::{ADMIN_PATH, DatabaseName};

use crate::databases;
use crate::http;

/// Arguments of `tuplekv db`.
#[derive(Debug, Args)]
pub(crate) struct DbArgs {
    #[command(subcommand)]
    command: DbCommand,
}

#[derive(Debug, Subcommand)]
enum DbCommand {
    /// Create a database (`http://HOST:PORT/NAME`); an existing one is left as it is.
    Create {
        /// Its name: a-z, 0-9, `-`, `_`, at most 63 characters.
        name: String,
        #[command(flatten)]
        at: WhereArgs,
    },
    /// List the databases, one name per line (with `--url`, the open ones marked).
    List {
        #[command(flatten)]
        at: WhereArgs,
    },
    /// Delete a database and all its data.
    Drop {
        /// Its name.
        name: String,
        /// Yes, delete it and everything in it.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        at: WhereArgs,
    },
}

/// `--databases ROOT` or `--url URL`.
#[derive(Debug, Args)]
struct WhereArgs {
    /// The server's data root (`tuplekv serve --databases ROOT`).
    #[arg(
        long,
        value_name = "ROOT",
        required_unless_present = "url",
        conflicts_with = "url"
    )]
    databases: Option<PathBuf>,
    /// A running server, `http://HOST:PORT`.
    #[arg(long)]
    url: Option<String>,
    /// The server's access token (with `--url`).
    #[arg(long, env = "TUPLEKV_ACCESS_TOKEN", hide_env_values = true)]
    access_token: Option<String>,
}

impl WhereArgs {
    fn token(&self) -> Result<&str, String> {
        self.access_token.as_deref().ok_or_else(|| {
            "--url needs an access token: pass --access-token or set TUPLEKV_ACCESS_TOKEN".into()
        })
    }
}

fn parse_name(name: &str) -> Result<DatabaseName, String> {
    DatabaseName::new(name).map_err(|e| format!("{name:?}: {e}"))
}

/// The server's answer, or its text as the error.
fn admin(at: &WhereArgs, url: &str, method: &str, path: &str) -> Result<(u16, String), String> {
    let (status, body) = http::request(method, url, path, at.token()?)?;
    // The server's generic 404 (no such route), not a database's "not found".
    if status == 405 || (status == 404 && body.contains("Resource not found")) {
        Err(format!(
            "{url} does not serve named databases: start it with --databases ROOT or \
             --create-databases"
        ))
    } else if (200..300).contains(&status) || status == 404 {
        Ok((status, body))
    } else {
        Err(format!("{url} answered {status}: {}", body.trim()))
    }
}

/// Runs `tuplekv db`.
pub(crate) fn run(args: DbArgs) -> Result<(), String> {
    match args.command {
        DbCommand::Create { name, at } => {
            let name = parse_name(&name)?;
            match (&at.databases, &at.url) {
                (Some(root), _) => {
                    let (id, created) = databases::create(root, &name)?;
                    if created {
                        println!("created database {name} (id {id}) in {}", root.display());
                    } else {
                        println!("database {name} exists (id {id})");
                    }
                }
                (None, Some(url)) => {
                    let (status, body) = admin(&at, url, "PUT", &format!("{ADMIN_PATH}/{name}"))?;
                    if status == 404 {
                        return Err(format!("{url} answered 404: {}", body.trim()));
                    }
                    print!("{body}");
                }
                (None, None) => return Err("pass --databases ROOT or --url URL".into()),
            }
        }
        DbCommand::List { at } => match (&at.databases, &at.url) {
            (Some(root), _) => {
                for name in databases::list(root)? {
                    println!("{name}");
                }
            }
            (None, Some(url)) => {
                let (_, body) = admin(&at, url, "GET", ADMIN_PATH)?;
                let json: serde_json::Value = serde_json::from_str(&body)
                    .map_err(|e| format!("{url} answered something that is not a list: {e}"))?;
                for db in json["databases"].as_array().into_iter().flatten() {
                    let name = db["name"].as_str().unwrap_or_default();
                    let open = db["open"].as_bool().unwrap_or(false);
                    println!("{name}{}", if open { "\topen" } else { "" });
                }
            }
            (None, None) => return Err("pass --databases ROOT or --url URL".into()),
        },
        DbCommand::Drop { name, yes, at } => {
            let name = parse_name(&name)?;
            if !yes {
                return Err(format!(
                    "dropping database {name} deletes all its data: pass --yes to confirm"
                ));
            }
            match (&at.databases, &at.url) {
                (Some(root), _) => {
                    if !databases::drop_offline(root, &name)? {
                        return Err(format!("no database {name} in {}", root.display()));
                    }
                    println!("dropped database {name}");
                }
                (None, Some(url)) => {
                    let (status, body) =
                        admin(&at, url, "DELETE", &format!("{ADMIN_PATH}/{name}"))?;
                    if status == 404 {
                        return Err(body.trim().to_owned());
                    }
                    print!("{body}");
                }
                (None, None) => return Err("pass --databases ROOT or --url URL".into()),
            }
        }
    }
    Ok(())
}
