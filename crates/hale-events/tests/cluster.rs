//! `Cluster`: singleton work runs only on the instance holding its lease,
//! and moves to another instance when the holder lets go (two `Cluster`s
//! on one store stand for two instances).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hale_events::cluster::Cluster;
use hale_store::{Store, StoreOptions};
use tokio_util::sync::CancellationToken;

/// Runs `work` under lease "job" on `c`; counts the instances running it now.
fn leased(c: &Cluster, token: &CancellationToken, running: Arc<AtomicU32>, starts: Arc<AtomicU32>) {
    let fut = c.clone().while_held("job".into(), token.clone(), move |t| {
        let (running, starts) = (running.clone(), starts.clone());
        async move {
            running.fetch_add(1, Ordering::SeqCst);
            starts.fetch_add(1, Ordering::SeqCst);
            t.cancelled().await;
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    });
    tokio::spawn(fut);
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(20), "{what} within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_work_runs_on_one_instance_and_moves_when_the_holder_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    let (a, b) = (
        Cluster::new(store.clone(), "a".into()),
        Cluster::new(store.clone(), "b".into()),
    );
    let (ta, tb) = (CancellationToken::new(), CancellationToken::new());
    tokio::spawn(a.clone().keep(ta.clone()));
    tokio::spawn(b.clone().keep(tb.clone()));
    let running = Arc::new(AtomicU32::new(0));
    let (starts_a, starts_b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    leased(&a, &ta, running.clone(), starts_a.clone());
    leased(&b, &tb, running.clone(), starts_b.clone());
    until("one instance runs the work", || {
        running.load(Ordering::SeqCst) == 1
    })
    .await;
    let (holder, holder_token, other, other_starts) = if a.holds("job") {
        (a.clone(), ta.clone(), b.clone(), starts_b.clone())
    } else {
        (b.clone(), tb.clone(), a.clone(), starts_a.clone())
    };
    assert!(!other.holds("job"), "never both");
    assert_eq!(other_starts.load(Ordering::SeqCst), 0);
    let view = holder.view().await.unwrap();
    assert_eq!(view.instances.len(), 2, "{view:?}");
    assert_eq!(view.leases.len(), 1);
    assert_eq!(view.leases[0].holder, holder.id());

    // The holder stops (a clean shutdown): its work stops, the other takes over.
    holder_token.cancel();
    holder.release_all().await;
    until("the other instance takes the work", || {
        other_starts.load(Ordering::SeqCst) == 1 && other.holds("job")
    })
    .await;
    until("exactly one runs it", || {
        running.load(Ordering::SeqCst) == 1
    })
    .await;
    let view = other.view().await.unwrap();
    assert_eq!(view.leases[0].holder, other.id());
    assert_eq!(
        view.instances.len(),
        1,
        "the holder's heartbeat row is gone"
    );
    ta.cancel();
    tb.cancel();
}

/// With SQLite (one instance per data directory), renewals stuck behind a
/// locked database — as behind a busy journal writer — never stop the
/// leased work: no other instance could take the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_sqlite_store_does_not_stop_leased_work() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(dir.path(), StoreOptions::default())
        .await
        .unwrap();
    let a = Cluster::new(store.clone(), "a".into());
    let token = CancellationToken::new();
    tokio::spawn(a.clone().keep(token.clone()));
    let running = Arc::new(AtomicU32::new(0));
    let starts = Arc::new(AtomicU32::new(0));
    leased(&a, &token, running.clone(), starts.clone());
    until("the work runs", || running.load(Ordering::SeqCst) == 1).await;
    let url = format!(
        "sqlite://{}",
        dir.path().join(hale_store::SQLITE_FILE).display()
    );
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    // Past the lease's whole TTL since its last renewal: on PostgreSQL the
    // work would have stopped (`keeps_working`) and the renewals, failing
    // after SQLite's busy timeout, would have given it up.
    tokio::time::sleep(hale_core::lease::LEASE_TTL + Duration::from_secs(1)).await;
    assert_eq!(running.load(Ordering::SeqCst), 1, "the work kept running");
    assert!(a.holds("job"));
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(running.load(Ordering::SeqCst), 1);
    assert_eq!(
        starts.load(Ordering::SeqCst),
        1,
        "never stopped, never restarted"
    );
    token.cancel();
}
