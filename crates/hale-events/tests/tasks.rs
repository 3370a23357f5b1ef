//! TaskSet: a dying task is reported with its name; shutdown is bounded.

use std::time::{Duration, Instant};

use hale_events::tasks::TaskSet;

#[tokio::test]
async fn a_failing_task_is_reported_by_name() {
    let tasks = TaskSet::new();
    let t = tasks.token();
    tasks.spawn("steady", async move {
        t.cancelled().await;
        Ok(())
    });
    tasks.spawn("relay:webhook", async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        anyhow::bail!("receiver config vanished")
    });
    let (name, err) = tokio::time::timeout(Duration::from_secs(5), tasks.first_failure())
        .await
        .expect("failure reported");
    assert_eq!(name, "relay:webhook");
    assert!(
        format!("{err:#}").contains("receiver config vanished"),
        "{err:#}"
    );
    assert_eq!(tasks.names(), vec!["steady".to_string()]);
    assert!(tasks.shutdown(Duration::from_secs(1)).await.is_empty());
}

#[tokio::test]
async fn an_early_ok_exit_and_a_panic_are_failures_too() {
    let tasks = TaskSet::new();
    tasks.spawn("quitter", async { Ok(()) });
    let (name, err) = tasks.first_failure().await;
    assert_eq!(name, "quitter");
    assert!(err.to_string().contains("exited unexpectedly"));
    tasks.spawn(String::from("prober"), async {
        if true {
            panic!("boom");
        }
        Ok(())
    });
    let (name, err) = tasks.first_failure().await;
    assert_eq!(name, "prober");
    assert!(err.to_string().contains("panicked: boom"), "{err}");
}

#[tokio::test]
async fn shutdown_is_bounded_and_names_stragglers() {
    let tasks = TaskSet::new();
    let t = tasks.token();
    tasks.spawn("polite", async move {
        t.cancelled().await;
        Ok(())
    });
    tasks.spawn("stuck", async {
        std::future::pending::<()>().await;
        Ok(())
    });
    let watcher = tasks.clone();
    let started = Instant::now();
    let aborted = tasks.shutdown(Duration::from_millis(200)).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(aborted, vec!["stuck".to_string()]);
    // Tasks ending because of shutdown are not failures.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), watcher.first_failure())
            .await
            .is_err()
    );
}
