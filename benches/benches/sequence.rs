//! Code sequences. Fast mode's `next()` beside the limit (a bare `AtomicU64::fetch_add`) and a
//! `Mutex<u64>`, with 1 and 2 threads; gapless mode with 1, 4 and 16 concurrent requesters on
//! the in-memory and the durable (`Sync`) engine (one handle shared; and in memory a handle
//! per requester, numbered by the store and, the old mode, by checking the counter), beside Redis `INCR` over loopback (one
//! connection per requester, unpipelined; `cargo xtask bench` starts the server) and the
//! guide's read-check-set counter on `denokv_sqlite` in memory. And the async twins beside the
//! blocking calls, one caller in memory (`sequence/async_next`).

use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tuplekv_benches::denokv::{self, DenoSqlite};
use tuplekv_benches::redis::Redis;
use tuplekv_benches::skip;
use tuplekv_codec::{encode_key, key};
use tuplekv_engine::{Database, Options};
use tuplekv_sequence::{Mode, Numbering, SequenceOptions, Sequences};

/// Runs `op(thread)` `iters` times split over `threads` threads; returns the wall time per
/// `iters` operations.
fn split(threads: u64, iters: u64, op: impl Fn(usize) + Sync) -> Duration {
    let per = iters.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let op = &op;
            s.spawn(move || {
                for _ in 0..per {
                    op(t as usize);
                }
            });
        }
    });
    start
        .elapsed()
        .mul_f64(iters as f64 / (per * threads) as f64)
}

fn fast(c: &mut Criterion) {
    let seqs = Sequences::new(Database::in_memory());
    if let Err(e) = seqs.create("INFO", SequenceOptions::default()) {
        skip("sequence/fast_next", "tuplekv", &e.to_string());
        return;
    }
    let Ok(info) = seqs.fast("INFO") else {
        return;
    };
    let atomic = AtomicU64::new(0);
    let mutex = Mutex::new(0u64);
    let mut g = c.benchmark_group("sequence/fast_next");
    for threads in [1u64, 2] {
        // Throughput per iteration: one number (threads share the iterations).
        g.throughput(Throughput::Elements(1));
        let param = format!("{threads} thread(s)");
        g.bench_function(BenchmarkId::new("tuplekv", &param), |b| {
            b.iter_custom(|n| {
                split(threads, n, |_| {
                    black_box(info.next_number().ok());
                })
            })
        });
        g.bench_function(BenchmarkId::new("atomic_u64", &param), |b| {
            b.iter_custom(|n| {
                split(threads, n, |_| {
                    black_box(atomic.fetch_add(1, Ordering::Relaxed));
                })
            })
        });
        g.bench_function(BenchmarkId::new("mutex_u64", &param), |b| {
            b.iter_custom(|n| {
                split(threads, n, |_| {
                    let mut guard = mutex.lock().unwrap_or_else(|e| e.into_inner());
                    *guard += 1;
                    black_box(*guard);
                })
            })
        });
    }
    g.finish();
}

fn gapless(c: &mut Criterion) {
    let group = "sequence/gapless";
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| std::path::PathBuf::from("../target"), Into::into);
    let _ = std::fs::create_dir_all(&base);
    let dir = tempfile::tempdir_in(&base).ok();
    let memory = Database::in_memory();
    let durable = dir
        .as_ref()
        .and_then(|d| Database::open(d.path().join("seq"), Options::default()).ok());
    if durable.is_none() {
        skip(
            group,
            "tuplekv_durable",
            "could not open a durable database",
        );
    }
    let deno = DenoSqlite::in_memory();
    if let Err(e) = &deno {
        skip(group, "denokv_sqlite", e);
    }
    let redis_probe = Redis::from_env();
    if let Err(e) = &redis_probe {
        skip(group, "redis_incr", e);
    }
    let gapless_options = SequenceOptions {
        mode: Mode::Gapless,
        ..SequenceOptions::default()
    };
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    for threads in [1u64, 4, 16] {
        let param = format!("{threads} requester(s)");
        for (name, db) in [
            ("tuplekv", Some(&memory)),
            ("tuplekv_durable", durable.as_ref()),
        ] {
            let Some(db) = db else { continue };
            let seqs = Sequences::new(db.clone());
            if seqs.create("ERR", gapless_options.clone()).is_err() {
                continue;
            }
            let Ok(err) = seqs.gapless("ERR") else {
                continue;
            };
            g.bench_function(BenchmarkId::new(name, &param), |b| {
                b.iter_custom(|n| {
                    split(threads, n, |_| {
                        assert!(err.next().is_ok());
                    })
                })
            });
        }
        // A handle per requester (app servers sharing one store), numbered by the store and,
        // for comparison, by the handles checking the counter (the old mode), in memory.
        for (name, numbering) in [
            ("tuplekv_handle_each", Numbering::Store),
            ("tuplekv_handle_each_checked", Numbering::Checked),
        ] {
            let seqs = Sequences::new(memory.clone());
            let handles: Vec<_> = (0..threads)
                .filter_map(|_| seqs.gapless("ERR").ok())
                .map(|h| h.with_numbering(numbering))
                .collect();
            if handles.len() as u64 != threads {
                continue;
            }
            g.bench_function(BenchmarkId::new(name, &param), |b| {
                b.iter_custom(|n| {
                    split(threads, n, |t| {
                        assert!(handles[t].next().is_ok());
                    })
                })
            });
        }
        if redis_probe.is_ok() {
            g.bench_function(BenchmarkId::new("redis_incr", &param), |b| {
                b.iter_custom(|n| {
                    // One connection per requester; failing loudly beats measuring fewer
                    // clients than the benchmark's name says.
                    let conns: Vec<Mutex<Redis>> = (0..threads)
                        .map(|_| match Redis::from_env() {
                            Ok(conn) => Mutex::new(conn),
                            Err(e) => panic!("redis connection: {e}"),
                        })
                        .collect();
                    split(threads, n, |t| {
                        let mut conn = conns[t].lock().unwrap_or_else(|e| e.into_inner());
                        assert!(conn.incr("bench:ERR").is_ok());
                    })
                })
            });
        }
        if let Ok(deno) = &deno {
            // The guide's pattern: read the counter, then commit counter+1 and the record
            // checked against the version read; retry on conflict.
            let counter = encode_key(&key!["counter", "ERR"]);
            g.bench_function(BenchmarkId::new("denokv_sqlite", &param), |b| {
                b.iter_custom(|n| {
                    let handles = deno.handles(threads as usize);
                    split(threads, n, |t| {
                        let d = &handles[t];
                        loop {
                            let Ok(current) = d.get_entry(&counter) else {
                                panic!("denokv_sqlite read failed");
                            };
                            let (value, check) = match current {
                                Some((v, vs)) => (
                                    u64::from_le_bytes(v.try_into().unwrap_or([0; 8])),
                                    denokv::unchanged(counter.clone(), vs),
                                ),
                                None => (0, denokv::absent(counter.clone())),
                            };
                            let next = value + 1;
                            let record = encode_key(&key!["errors", format!("ERR{next:03}")]);
                            let write = denokv_proto::AtomicWrite {
                                checks: vec![check, denokv::absent(record.clone())],
                                mutations: vec![
                                    denokv::set(counter.clone(), next.to_le_bytes().to_vec()),
                                    denokv::set(record, b"logged".to_vec()),
                                ],
                                enqueues: vec![],
                            };
                            // Ok(false) is a lost check race: read again. An error is a
                            // broken peer, not contention, and must not spin forever.
                            match d.commit(write) {
                                Ok(true) => break,
                                Ok(false) => {}
                                Err(e) => panic!("denokv_sqlite commit failed: {e}"),
                            }
                        }
                    })
                })
            });
        }
    }
    g.finish();
}

/// Polls `f` with a waker that does nothing until it is ready: for futures that are ready at
/// once (a fast sequence's `next_async` over the in-memory engine always is), this measures
/// the future's own cost, with no executor around it.
fn poll_now<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// The async twins beside the blocking calls, one caller, on the in-memory engine: fast
/// `next_async` polled directly (the overhead of the future over `next`), and gapless
/// `next_async` on a current-thread tokio runtime (its batch led by the handle's leader
/// thread, so it includes that thread handoff).
fn async_next(c: &mut Criterion) {
    let seqs = Sequences::new(Database::in_memory());
    let gapless = SequenceOptions {
        mode: Mode::Gapless,
        ..SequenceOptions::default()
    };
    let created = seqs
        .create("INFO", SequenceOptions::default())
        .and_then(|()| seqs.create("TKT", gapless));
    if let Err(e) = created {
        skip("sequence/async_next", "tuplekv", &e.to_string());
        return;
    }
    let (Ok(info), Ok(tkt)) = (seqs.fast("INFO"), seqs.gapless("TKT")) else {
        return;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let mut g = c.benchmark_group("sequence/async_next");
    g.throughput(Throughput::Elements(1));
    g.bench_function("fast/blocking", |b| {
        b.iter(|| black_box(info.next_number().ok()));
    });
    g.bench_function("fast/async", |b| {
        b.iter(|| black_box(poll_now(info.next_number_async()).ok()));
    });
    g.bench_function("gapless/blocking", |b| {
        b.iter(|| black_box(tkt.next().ok().map(|i| i.number())));
    });
    g.bench_function("gapless/async", |b| {
        b.iter(|| black_box(rt.block_on(tkt.next_async()).ok().map(|i| i.number())));
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = fast, gapless, async_next
}
criterion_main!(benches);
