//! The signals the process answers: SIGTERM and Ctrl-C stop it ([`shutdown_signal`]),
//! SIGUSR1 puts the beanstalk listener in drain mode for good, as it does beanstalkd.

/// Puts the beanstalk listener in drain mode on SIGUSR1, as beanstalkd does.
pub(crate) fn drain_on_sigusr1(control: delayq_beanstalk::Control) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::user_defined1()) {
            Ok(mut sig) => {
                if sig.recv().await.is_some() {
                    tracing::info!("received SIGUSR1: beanstalk drain mode");
                    control.drain();
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot listen for SIGUSR1"),
        }
    });
    #[cfg(not(unix))]
    let _ = control;
}

/// Completes on SIGTERM or Ctrl-C (SIGINT). If a handler cannot be installed, that signal is
/// logged and ignored; the other still works.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received Ctrl-C"),
        () = terminate => tracing::info!("received SIGTERM"),
    }
}
