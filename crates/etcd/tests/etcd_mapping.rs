//! What is particular to the etcd mapping, beyond the shared contract: a compacted snapshot
//! is an error rather than newer data, deletions stay visible to range comparisons but not
//! to reads, a commit without mutations still gets a revision of its own, a commit with
//! versionstamped keys claims a stamp between two revisions that no other commit shares;
//! etcd's refusals are definite errors; the collector
//! removes tombstones and expired values without losing a concurrent write or letting a
//! range check miss a change.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tuplekv_engine::codec::encode_key;
use tuplekv_engine::{
    AtomicWrite, ByteRange, CommitResult, Error, KeyBytes, ListOptions, RangeCheck, ReadView,
    Selector, Store, Versionstamp, key, versionstamped_key,
};
use tuplekv_etcd::{CollectOptions, Collected, EtcdStore};
use tuplekv_testkit::etcd::{Cluster, etcd_binary};

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start(3))
}

fn open() -> EtcdStore {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = format!("mapping/{}/", NEXT.fetch_add(1, Ordering::Relaxed));
    EtcdStore::connect(&cluster().client_urls(), prefix.as_bytes()).expect("a store")
}

/// Compaction of the shared cluster: tests that compact it (or need no other test's reads
/// in between) hold it alone; every other test holds it shared, so a compaction never lands
/// between two reads of one of its snapshots (which would then be `SnapshotExpired`).
static COMPACTION: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by tests that compact the shared cluster or need it not compacted meanwhile.
fn serial() -> std::sync::RwLockWriteGuard<'static, ()> {
    COMPACTION
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Held by every other test: no compaction while it runs.
fn no_compaction() -> std::sync::RwLockReadGuard<'static, ()> {
    COMPACTION
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A store on the shared cluster with no background collector: the test runs passes.
fn open_manual() -> EtcdStore {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = format!("collect/{}/", NEXT.fetch_add(1, Ordering::Relaxed));
    let options = CollectOptions { interval: None };
    EtcdStore::connect_with(&cluster().client_urls(), prefix.as_bytes(), &options).expect("a store")
}

/// Runs collector passes until one reaches the end of the store; their sum.
fn collect_all(store: &EtcdStore) -> Collected {
    let mut total = Collected::default();
    for _ in 0..100 {
        let pass = store.collect_garbage().expect("a collector pass");
        total.scanned += pass.scanned;
        total.expired += pass.expired;
        total.tombstones += pass.tombstones;
        total.skipped += pass.skipped;
        if pass.wrapped {
            return total;
        }
    }
    panic!("the collector never reached the end of the store")
}

/// Every key of the store, from its start.
fn everything() -> ByteRange {
    ByteRange {
        start: vec![0x00],
        end: vec![0xff],
    }
}

/// Most operations per transaction of the small member.
const SMALL_TXN_OPS: usize = 8;

/// Largest request of the small member, in bytes.
const SMALL_REQUEST_BYTES: usize = 16 * 1024;

/// Longest wait for the small member to answer.
const SMALL_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A one-member etcd with limits far below tuplekv's, on loopback; killed when dropped.
struct SmallMember {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl SmallMember {
    fn start() -> SmallMember {
        let port = || -> SocketAddr {
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
        };
        let (client, peer) = (port(), port());
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tuplekv-etcd-small-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let url = format!("http://{client}");
        let peer_url = format!("http://{peer}");
        let child = Command::new(etcd_binary())
            .args(["--name", "small", "--data-dir"])
            .arg(&dir)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("small={peer_url}")])
            .args(["--max-txn-ops", &SMALL_TXN_OPS.to_string()])
            .args(["--max-request-bytes", &SMALL_REQUEST_BYTES.to_string()])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts");
        SmallMember { child, dir, url }
    }

    fn connect(&self) -> EtcdStore {
        let deadline = Instant::now() + SMALL_READY_TIMEOUT;
        loop {
            match EtcdStore::connect(&[&self.url], b"small/") {
                Ok(store) => return store,
                Err(e) if Instant::now() > deadline => panic!("the small member: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SmallMember {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn refusals_of_the_cluster_are_definite_errors_and_a_dead_cluster_is_unavailable() {
    let _shared = no_compaction();
    let mut member = SmallMember::start();
    let store = member.connect();
    let mut op = store.atomic();
    for i in 0..SMALL_TXN_OPS as u64 + 2 {
        op = op.set(&key!["many", i], i);
    }
    match op.commit() {
        Err(Error::Remote {
            status: 400,
            message,
        }) => {
            assert!(message.contains("too many operations"), "{message}");
            assert!(message.contains("--max-txn-ops"), "{message}");
        }
        other => panic!("a transaction over --max-txn-ops gave {other:?}"),
    }
    let big = vec![7u8; SMALL_REQUEST_BYTES * 2];
    match store.atomic().set(&key!["big"], big).commit() {
        Err(Error::Remote {
            status: 400,
            message,
        }) => {
            assert!(message.contains("too large"), "{message}");
        }
        other => panic!("a request over --max-request-bytes gave {other:?}"),
    }
    assert_eq!(store.snapshot().get(&key!["big"]).expect("a read"), None);

    member.kill();
    let started = Instant::now();
    match store.snapshot().get(&key!["k"]) {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_transient()),
        other => panic!("a read of a dead cluster gave {other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took <= tuplekv_etcd::READ_RETRY_BUDGET + tuplekv_etcd::REQUEST_TIMEOUT * 2,
        "the read retried for {took:?}"
    );
    // Refused connections: the commit was never sent, so the error is definite.
    match store.atomic().set(&key!["k"], 1u64).commit() {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("a commit to a dead cluster gave {other:?}"),
    }
}

#[test]
fn tombstones_go_once_compacted_and_not_before() {
    let _serial = serial();
    let store = open_manual();
    for i in 0..3u64 {
        let _ = store
            .atomic()
            .set(&key!["t", i], i)
            .commit()
            .expect("a commit");
    }
    for i in 0..3u64 {
        let _ = store
            .atomic()
            .delete(&key!["t", i])
            .commit()
            .expect("a commit");
    }
    let before = collect_all(&store);
    assert_eq!((before.scanned, before.tombstones), (3, 0), "{before:?}");
    cluster().compact();
    let after = collect_all(&store);
    assert_eq!(after.tombstones, 3, "{after:?}");
    assert_eq!(collect_all(&store).scanned, 0, "keys are left in etcd");
    // A key collected reads and checks as absent, and can be written again.
    assert_eq!(
        store.snapshot().get(&key!["t", 0u64]).expect("a read"),
        None
    );
    let res = store
        .atomic()
        .check(&key!["t", 0u64], None)
        .set(&key!["t", 0u64], 9u64)
        .commit()
        .expect("a commit");
    assert!(res.is_committed());
}

#[test]
fn expired_values_become_tombstones_then_go() {
    let _serial = serial();
    let store = open_manual();
    let _ = store
        .atomic()
        .set_with_expiry(&key!["e"], 1u64, Duration::from_millis(1500))
        .set(&key!["stays"], 2u64)
        .commit()
        .expect("a commit");
    let early = collect_all(&store);
    assert_eq!(early.expired, 0, "{early:?}");
    std::thread::sleep(Duration::from_millis(1700));
    let pass = collect_all(&store);
    assert_eq!((pass.scanned, pass.expired), (2, 1), "{pass:?}");
    cluster().compact();
    let pass = collect_all(&store);
    assert_eq!(pass.tombstones, 1, "{pass:?}");
    assert_eq!(collect_all(&store).scanned, 1);
    let stays = store.snapshot().get(&key!["stays"]).expect("a read");
    assert_eq!(stays.map(|e| e.value.as_u64()), Some(Some(2)));
}

#[test]
fn a_range_check_older_than_a_collected_tombstone_conflicts() {
    let _serial = serial();
    let store = open_manual();
    let _ = store
        .atomic()
        .set(&key!["r"], 1u64)
        .commit()
        .expect("a commit");
    let snapshot = store.snapshot();
    let listed = snapshot.scan(&everything(), false, 10).expect("a scan");
    assert_eq!(listed.len(), 1);
    let since = EtcdStore::snapshot_versionstamp(&snapshot);
    let _ = store
        .atomic()
        .delete(&key!["r"])
        .commit()
        .expect("a commit");
    cluster().compact();
    assert_eq!(collect_all(&store).tombstones, 1);
    let range_check = |since| {
        let mut write = AtomicWrite::default();
        write.range_checks.push(RangeCheck {
            start: KeyBytes::from(everything().start),
            end: KeyBytes::from(everything().end),
            since,
            expires_at: None,
        });
        write
    };
    // The key this snapshot listed is gone, with no tombstone left to compare: the fence
    // must make the commit fail, from this handle (which saw the fence move) and from
    // another handle on the same store (which learns it from the failed comparison).
    let other = EtcdStore::connect_with(
        &cluster().client_urls(),
        store.prefix(),
        &CollectOptions { interval: None },
    )
    .expect("a second handle");
    for handle in [&store, &other] {
        match handle.commit(range_check(since)).expect("an answer") {
            CommitResult::Conflict(c) => assert!(c.range_changed, "{c:?}"),
            other => panic!("a stale range check committed: {other:?}"),
        }
    }
    // A snapshot taken after the collection commits.
    let fresh = store.snapshot();
    assert!(
        fresh
            .scan(&everything(), false, 10)
            .expect("a scan")
            .is_empty()
    );
    let now = EtcdStore::snapshot_versionstamp(&fresh);
    assert!(
        store
            .commit(range_check(now))
            .expect("an answer")
            .is_committed()
    );
}

#[test]
fn a_snapshot_older_than_the_compacted_revision_is_an_error_not_newer_data() {
    let _serial = serial();
    let store = open();
    let _ = store
        .atomic()
        .set(&key!["k"], 1u64)
        .commit()
        .expect("a commit");
    let snapshot = store.snapshot();
    assert!(snapshot.get(&key!["k"]).expect("a read").is_some());
    let _ = store
        .atomic()
        .set(&key!["k"], 2u64)
        .commit()
        .expect("a commit");
    cluster().compact();
    match snapshot.get(&key!["k"]) {
        Err(e @ Error::SnapshotExpired { .. }) => assert!(e.is_transient()),
        other => panic!("a read of a compacted snapshot gave {other:?}"),
    }
}

#[test]
fn a_deleted_key_is_absent_to_reads_and_checks() {
    let _shared = no_compaction();
    let store = open();
    let _ = store
        .atomic()
        .set(&key!["k"], 1u64)
        .commit()
        .expect("a commit");
    let _ = store
        .atomic()
        .delete(&key!["k"])
        .commit()
        .expect("a commit");
    assert_eq!(store.snapshot().get(&key!["k"]).expect("a read"), None);
    let listed = store
        .snapshot()
        .scan(
            &tuplekv_engine::ByteRange {
                start: vec![],
                end: vec![0xff],
            },
            false,
            10,
        )
        .expect("a scan");
    assert!(listed.is_empty(), "a tombstone was listed: {listed:?}");
    let res = store
        .atomic()
        .check(&key!["k"], None)
        .set(&key!["k"], 3u64)
        .commit()
        .expect("a commit");
    assert!(
        res.is_committed(),
        "a check for absence failed on a tombstone"
    );
}

#[test]
fn a_fresh_snapshot_knows_its_versionstamp_before_any_read() {
    let _shared = no_compaction();
    // The server asks a new snapshot for its stamp to hold it; the read that fixes it must
    // not trip over the store's own keys (the marker every commit writes).
    let store = open();
    let first = committed(store.atomic().set(&key!["a"], 1u64));
    let empty = committed(store.atomic());
    let fresh = store.snapshot();
    let stamp = EtcdStore::try_snapshot_versionstamp(&fresh).expect("the stamp");
    assert!(stamp >= empty && empty > first, "{stamp} {empty} {first}");
    assert_eq!(EtcdStore::snapshot_versionstamp(&fresh), stamp);
    assert_eq!(
        fresh
            .get(&key!["a"])
            .expect("a read")
            .expect("set")
            .versionstamp,
        first,
        "the snapshot reads at the stamp it gave"
    );
}

#[test]
fn stores_under_nested_prefixes_never_see_each_others_keys() {
    let _shared = no_compaction();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let outer = format!("nest{n}");
    // Without an end to the prefix, this store's keys would lie among the outer one's data.
    let inner = format!("nest{n}dinner");
    let connect = |prefix: &str| {
        EtcdStore::connect(&cluster().client_urls(), prefix.as_bytes()).expect("a store")
    };
    let (a, b) = (connect(&outer), connect(&inner));
    committed(b.atomic().set(&key!["k"], 1u64).delete(&key!["gone"]));
    let all = |s: &EtcdStore| -> Vec<Vec<u8>> {
        s.snapshot()
            .scan(&everything(), false, 100)
            .expect("a scan")
            .into_iter()
            .map(|e| e.key.as_slice().to_vec())
            .collect()
    };
    assert!(
        all(&a).is_empty(),
        "the outer store sees nothing of the inner"
    );
    assert_eq!(all(&b).len(), 1);
    assert_eq!(b.prefix(), inner.as_bytes());
    match EtcdStore::connect(&cluster().client_urls(), b"bad\0prefix") {
        Err(tuplekv_etcd::ConnectError::PrefixHasZeroByte) => {}
        other => panic!("a prefix with a zero byte gave {other:?}"),
    }
}

#[test]
fn a_scan_finds_the_live_entry_behind_a_long_run_of_tombstones() {
    let _shared = no_compaction();
    // More tombstones than one page of the scan ever asks for (its pages double up to a
    // bound): the first live key behind them, forwards, and before them, backwards.
    let store = open_manual();
    for chunk in 0..3u64 {
        let mut atomic = store.atomic();
        for i in 0..500 {
            atomic = atomic.set(&key!["t", chunk * 500 + i], 1u64);
        }
        committed(atomic);
        let mut atomic = store.atomic();
        for i in 0..500 {
            atomic = atomic.delete(&key!["t", chunk * 500 + i]);
        }
        committed(atomic);
    }
    committed(store.atomic().set(&key!["u"], 2u64).set(&key!["s"], 3u64));
    let snapshot = store.snapshot();
    let first = |reverse, range: ByteRange| -> Vec<Vec<u8>> {
        snapshot
            .scan(&range, reverse, 1)
            .expect("a scan")
            .into_iter()
            .map(|e| e.key.as_slice().to_vec())
            .collect()
    };
    let from_t = ByteRange {
        start: encode_key(&key!["t"]).to_vec(),
        end: vec![0xff],
    };
    assert_eq!(first(false, from_t), [encode_key(&key!["u"]).to_vec()]);
    let up_to_u = ByteRange {
        start: vec![0x00],
        end: encode_key(&key!["u"]).to_vec(),
    };
    assert_eq!(first(true, up_to_u), [encode_key(&key!["s"]).to_vec()]);
}

#[test]
fn a_watch_reports_a_set_a_delete_and_an_expiry_as_they_happen() {
    use tuplekv_engine::KeyWatch;
    let _shared = no_compaction();
    let store = open();
    let (a, b) = (key!["w", "a"], key!["w", "b"]);
    let keys = vec![
        KeyBytes::from(encode_key(&a)),
        KeyBytes::from(encode_key(&b)),
    ];
    let mut watch = store.watch_raw(keys).expect("a watch");
    let mut next = || tuplekv_testkit::executor::block_on(watch.next()).expect("open");
    let first = next();
    assert_eq!(first.entries, [None, None]);
    // Waits for the state `want` says is the one (states in between may be collapsed).
    let mut wait = |what: &str, want: &dyn Fn(&[Option<tuplekv_engine::Entry>]) -> bool| {
        for _ in 0..50 {
            if want(&next().entries) {
                return;
            }
        }
        panic!("the watch never showed {what}");
    };
    let set = committed(store.atomic().set(&a, 1u64));
    wait("a set", &|e| {
        e[0].as_ref().map(|e| e.versionstamp) == Some(set)
    });
    committed(store.atomic().delete(&a));
    wait("a delete", &|e| e[0].is_none());
    // An expiry writes nothing etcd could report: the watch wakes at the deadline.
    let expiring = store
        .atomic()
        .set_with_expiry(&b, 2u64, std::time::Duration::from_millis(300));
    committed(expiring);
    wait("a value", &|e| e[1].is_some());
    wait("the value expired", &|e| e[1].is_none());
    // A versionstamped commit's value carries its claimed stamp in the watch too.
    let claimed = committed(
        store
            .atomic()
            .set(&a, 3u64)
            .set_versionstamped(&key!["w", "log"], 1u64),
    );
    wait("a claimed stamp", &|e| {
        e[0].as_ref().map(|e| e.versionstamp) == Some(claimed)
    });
}

#[test]
fn a_watch_goes_on_across_the_loss_of_every_member_in_turn() {
    use tuplekv_engine::KeyWatch;
    // A cluster of its own: its members are killed one after another.
    let own = Cluster::start(3);
    let store = EtcdStore::connect(&own.client_urls(), b"watch-failover/").expect("a store");
    let k = key!["w"];
    let mut watch = store
        .watch_raw(vec![KeyBytes::from(encode_key(&k))])
        .expect("a watch");
    // The states, through a channel, so a watch that stopped fails the test instead of
    // hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while let Some(update) = tuplekv_testkit::executor::block_on(watch.next()) {
            if tx.send(update).is_err() {
                return;
            }
        }
    });
    let next = || {
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("the watch went quiet for a minute")
    };
    assert_eq!(next().entries, [None]);
    // Whichever member the watch's stream is on, it dies once: the watch starts over.
    for (round, member) in (0..own.len()).enumerate() {
        own.kill(member);
        let stamp = loop {
            // Without a member, a commit may fail or its outcome be lost: try a fresh value.
            match store.atomic().set(&k, round as u64).commit() {
                Ok(CommitResult::Committed { versionstamp, .. }) => break versionstamp,
                Ok(other) => panic!("a blind set gave {other:?}"),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
            }
        };
        loop {
            let update = next();
            let seen = update.entries[0].as_ref().map(|e| e.versionstamp);
            if seen == Some(stamp) {
                break;
            }
            assert!(
                seen < Some(stamp),
                "the watch skipped ahead: {seen:?} vs {stamp}"
            );
        }
        own.restart(member);
    }
}

#[test]
fn a_commit_without_mutations_gets_a_new_versionstamp() {
    let _shared = no_compaction();
    let store = open();
    let a = store.atomic().commit().expect("a commit").versionstamp();
    let b = store.atomic().commit().expect("a commit").versionstamp();
    assert!(a.is_some() && b > a, "{a:?} then {b:?}");
}

/// Commits `atomic`, which must commit; its versionstamp.
fn committed(atomic: tuplekv_engine::Atomic<'_, EtcdStore>) -> Versionstamp {
    match atomic.commit().expect("a commit") {
        CommitResult::Committed { versionstamp, .. } => versionstamp,
        other => panic!("expected a commit: {other:?}"),
    }
}

#[test]
fn a_versionstamped_commit_claims_a_stamp_between_two_revisions() {
    let _shared = no_compaction();
    let store = open();
    let before = committed(store.atomic().set(&key!["plain"], 1u64));
    // Another store on the cluster writes meanwhile: revisions move, our claim holds.
    let neighbour = open();
    committed(neighbour.atomic().set(&key!["elsewhere"], 1u64));
    let claimed = committed(
        store
            .atomic()
            .set_versionstamped(&key!["log"], "first")
            .set(&key!["beside"], 2u64),
    );
    let after = committed(store.atomic().set(&key!["plain"], 3u64));
    assert!(
        before < claimed && claimed < after,
        "{before} {claimed} {after}"
    );
    assert_eq!(
        claimed.as_bytes()[8..],
        [0, 1],
        "a claimed stamp, not a revision"
    );

    let snapshot = store.snapshot();
    let written = versionstamped_key(&encode_key(&key!["log"]), claimed);
    let entry = snapshot
        .get_raw(&written)
        .expect("a read")
        .expect("written");
    assert_eq!(entry.versionstamp, claimed);
    let beside = snapshot.get(&key!["beside"]).expect("a read").expect("set");
    assert_eq!(
        beside.versionstamp, claimed,
        "every value of the commit carries it"
    );
    let listed: Vec<_> = store
        .list(&Selector::prefix(&key!["log"]), ListOptions::default())
        .expect("a list")
        .map(|e| e.expect("an entry").versionstamp)
        .collect();
    assert_eq!(listed, [claimed]);

    // A check of the claimed stamp holds until the value changes, then fails naming what
    // is there.
    let checked = store
        .atomic()
        .check(&key!["beside"], Some(claimed))
        .sum(&key!["beside"], 1);
    let summed = committed(checked);
    assert!(summed > after);
    match store
        .atomic()
        .check(&key!["beside"], Some(claimed))
        .set(&key!["beside"], 0u64)
        .commit()
        .expect("an answer")
    {
        CommitResult::Conflict(conflict) => {
            assert_eq!(conflict.failed_checks.len(), 1);
            assert_eq!(conflict.failed_checks[0].actual, Some(summed));
        }
        other => panic!("a stale claimed stamp committed: {other:?}"),
    }
    let now = store.snapshot().get(&key!["beside"]).unwrap().unwrap();
    assert_eq!((now.value.as_u64(), now.versionstamp), (Some(3), summed));
}

#[test]
fn versionstamped_commits_racing_plain_ones_never_share_or_reorder_stamps() {
    let _shared = no_compaction();
    let store = open();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (claims, plain) = std::thread::scope(|s| {
        let plain = s.spawn(|| {
            let mut stamps = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                stamps.push(committed(store.atomic().sum(&key!["busy"], 1)));
            }
            stamps
        });
        let mut claims = Vec::new();
        let mut conflicts = 0;
        while claims.len() < 20 {
            match store
                .atomic()
                .set_versionstamped(&key!["log"], 1u64)
                .commit()
            {
                Ok(CommitResult::Committed { versionstamp, .. }) => claims.push(versionstamp),
                Err(Error::TransactionConflict { .. }) => conflicts += 1,
                other => panic!("a versionstamped commit gave {other:?}"),
            }
            assert!(conflicts < 50, "versionstamped commits starve");
        }
        stop.store(true, Ordering::Relaxed);
        eprintln!("20 versionstamped commits beside a busy writer: {conflicts} gave up");
        (claims, plain.join().expect("the plain committer"))
    });
    for stamps in [&claims, &plain] {
        assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{stamps:?}");
    }
    let mut all: Vec<_> = claims.iter().chain(&plain).copied().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), claims.len() + plain.len(), "a stamp was shared");
    // Every claimed key was written, each holding its own stamp, in stamp order.
    let listed: Vec<Versionstamp> = store
        .list(&Selector::prefix(&key!["log"]), ListOptions::default())
        .expect("a list")
        .map(|e| e.expect("an entry").versionstamp)
        .collect();
    assert_eq!(listed, claims);
    // The busy counter's final stamp is the last plain commit's: the claims left no trace
    // on it.
    let busy = store.snapshot().get(&key!["busy"]).unwrap().unwrap();
    assert_eq!(Some(busy.versionstamp), plain.last().copied());
}

#[test]
fn a_key_written_twice_in_one_commit_is_folded() {
    let _shared = no_compaction();
    let store = open();
    let res = store
        .atomic()
        .set(&key!["n"], 5u64)
        .sum(&key!["n"], 2)
        .max(&key!["n"], 6)
        .commit()
        .expect("one etcd put for the key");
    assert!(res.is_committed());
    let n = store
        .snapshot()
        .get(&key!["n"])
        .expect("a read")
        .expect("set");
    assert_eq!(n.value.as_u64(), Some(7));
}
