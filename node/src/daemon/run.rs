//! The daemon as a service ([`Daemon::run`]): started, its control socket and metrics
//! open, then ready (the `listening on` line scripts wait for, and systemd's `READY=1`),
//! then driven by its signals until told to stop: a reload re-reads what the node trusts
//! and its credentials (a failed one keeps the old), a stop releases every job. The
//! signals are the process's ([`Signals::Process`]) or a test's ([`Signals::Given`]).

use std::net::SocketAddr;

use tokio::sync::mpsc;

use super::Daemon;
use crate::Error;

/// What the daemon is told from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Read the trusted keys, the revoked ids and the credentials again (SIGHUP).
    Reload,
    /// Release every job and stop (SIGTERM, SIGINT).
    Shutdown,
}

/// How the daemon ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Every job released.
    Stopped,
    /// Mounted jobs left to the keeper for the next daemon: exit the process now, without
    /// running destructors or shutting the runtime down, so nothing unmounts them or
    /// fails a request they wait on (the next daemon has the kernel resend those).
    HandedOver,
}

/// Where the daemon's [`Signal`]s come from.
pub enum Signals {
    /// The process's: SIGHUP reloads, SIGTERM and SIGINT stop.
    Process,
    /// A channel's (tests); its end stops the daemon.
    Given(mpsc::UnboundedReceiver<Signal>),
}

impl Signals {
    /// The signals as a channel: the process's handlers are installed now.
    fn receive(self) -> Result<mpsc::UnboundedReceiver<Signal>, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        let rx = match self {
            Signals::Given(rx) => rx,
            Signals::Process => {
                let install = |kind: SignalKind, what: &str| {
                    signal(kind).map_err(|source| Error::Sys {
                        what: format!("installing a {what} handler"),
                        source,
                    })
                };
                let mut term = install(SignalKind::terminate(), "SIGTERM")?;
                let mut int = install(SignalKind::interrupt(), "SIGINT")?;
                let mut hup = install(SignalKind::hangup(), "SIGHUP")?;
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(async move {
                    loop {
                        let signal = tokio::select! {
                            _ = term.recv() => Signal::Shutdown,
                            _ = int.recv() => Signal::Shutdown,
                            _ = hup.recv() => Signal::Reload,
                        };
                        if tx.send(signal).is_err() {
                            return;
                        }
                    }
                });
                rx
            }
        };
        Ok(rx)
    }
}

impl Daemon {
    /// Runs `teesfs daemon` until a [`Signal::Shutdown`] (or the end of the signals), then
    /// releases every job, or with a keeper leaves the mounted ones to it. Must run inside
    /// a tokio runtime.
    pub async fn run(cfg: super::DaemonConfig, signals: Signals) -> Result<Ended, Error> {
        let metrics = cfg.metrics.clone();
        let daemon = Daemon::start(cfg)?;
        let control = daemon.open_control();
        let metrics = match metrics {
            Some((addr, endpoint)) => Some(daemon.listen_metrics(addr, endpoint).await?),
            None => None,
        };
        // Signal handlers before the daemon says it is up: a SIGTERM right after readiness
        // must unmount the jobs, not kill the daemon outright.
        let mut signals = signals.receive()?;
        let (addr, host) = (daemon.local_addr(), &daemon.shared.cfg.host);
        // Scripts and tests read this line to learn the bound address; the control socket
        // is open by then.
        match metrics {
            Some(m) => {
                crate::outln!("listening on {addr} as {host}, metrics at http://{m}/metrics")
            }
            None => crate::outln!("listening on {addr} as {host}"),
        }
        // systemd (Type=notify): the daemon is ready once it listens and its socket is open.
        notify(sd_notify::NotifyState::Ready);
        let control = tokio::spawn(super::control::control_loop(daemon.shared.clone(), control));
        while let Some(Signal::Reload) = signals.recv().await {
            notify(sd_notify::NotifyState::Reloading);
            if let Err(e) = daemon.reload().await {
                tracing::error!(error = %e, "reload failed; keeping the previous keys and credentials");
            }
            notify(sd_notify::NotifyState::Ready);
        }
        let keeping = daemon.shared.cfg.keeper.is_some();
        if keeping {
            tracing::info!("shutting down: mounted jobs stay for the next daemon");
        } else {
            tracing::info!("shutting down: unmounting jobs");
        }
        notify(sd_notify::NotifyState::Stopping);
        control.abort();
        daemon.stop().await;
        Ok(if keeping {
            Ended::HandedOver
        } else {
            Ended::Stopped
        })
    }

    /// Serves `--metrics` at `addr`: the address bound.
    async fn listen_metrics(
        &self,
        addr: SocketAddr,
        endpoint: crate::metrics::endpoint::EndpointConfig,
    ) -> Result<SocketAddr, Error> {
        let listen = |source| Error::MetricsListen { addr, source };
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen)?;
        let bound = listener.local_addr().map_err(listen)?;
        self.shared.serve_metrics(listener, endpoint);
        tracing::info!("serving metrics at http://{bound}/metrics");
        Ok(bound)
    }
}

/// Tells systemd, if it listens (a failure is worth a warning, not an exit).
fn notify(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(&[state]) {
        tracing::warn!(error = %e, "cannot tell systemd the daemon's state");
    }
}
