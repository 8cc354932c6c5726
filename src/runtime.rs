//! Start-up and shutdown of a broker process.
//!
//! Start-up in cluster mode (`controller.quorum.voters` set): after the logs are open, start
//! the metadata node and the metadata-sync task, settle the cluster id with the quorum (a
//! `cluster.id` setting or a log dir of another cluster stops the start here), register the
//! broker, wait for the first sync (until then a partition would behave as on a single node),
//! ask to be unfenced, start the heartbeat loop, and only then serve clients. The controller
//! loop (active only on the Raft leader) starts with the metadata node, before registering.
//! The listeners are bound first (to learn their ports) but accept nothing until then: a
//! client never sees a broker without the cluster's id.
//!
//! Shutdown order (each step bounded): in cluster mode, stop heartbeats and do a controlled
//! shutdown (fence this broker, move its partitions' leadership away); stop accepting
//! connections; let in-flight requests finish (up to 10 s); stop background services; flush
//! and close every log, write checkpoints and the clean-shutdown marker; in cluster mode, stop
//! the metadata node last.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::controller::{ClusterControl, QuorumIsrSink};
use crate::services::Services;
use crate::tiering::Tiering;

/// A running broker.
pub struct Running {
    pub broker: Arc<Broker>,
    pub services: Arc<Services>,
    pub kafka_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    shutdown: CancellationToken,
    connections: TaskTracker,
    tasks: TaskTracker,
    cluster: Option<ClusterMembership>,
}

/// Cluster mode's parts the runtime stops in order.
struct ClusterMembership {
    control: Arc<ClusterControl>,
    /// Stops the heartbeats before the controlled shutdown fences this broker.
    heartbeats: CancellationToken,
}

/// Time allowed for the controlled shutdown and for stopping the metadata node.
const CLUSTER_SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);
/// How long start-up waits for the first metadata sync after registering.
const FIRST_SYNC_LIMIT: Duration = Duration::from_secs(60);

/// Starts cluster mode: metadata node, cluster id, sync task, registration, first sync,
/// unfencing, then the heartbeat loop (the controller loop starts first).
async fn join_cluster(
    broker: &Arc<Broker>,
    cluster: &crate::config::ClusterConfig,
    shutdown: &CancellationToken,
    services: &TaskTracker,
    tiering: Option<Arc<Tiering>>,
) -> anyhow::Result<ClusterMembership> {
    let control = ClusterControl::start(&broker.config, cluster)
        .await
        .context("starting the metadata quorum node")?;
    // The controller's duties do not wait for this broker: a restarted node that wins the
    // Raft election before its previous incarnation's session ran out must still expire that
    // session, or its own registration would wait for it forever.
    services.spawn(control.clone().run_controller(shutdown.clone()));
    if let Some(t) = tiering.clone().filter(|_| control.restores_from_bucket()) {
        services.spawn(crate::controller::restore::run(
            control.clone(),
            t,
            shutdown.clone(),
        ));
    }
    let joined = async {
        // Before anything of the quorum's reaches the local logs: a broker of another
        // cluster stops here.
        let cluster_id = control
            .establish_cluster_id(&broker.cluster_id_candidate(), shutdown)
            .await
            .context("settling the cluster id with the metadata quorum")?;
        let b = broker.clone();
        tokio::task::spawn_blocking(move || b.adopt_cluster_id(&cluster_id))
            .await
            .context("cluster id task")??;
        if let Some(id) = broker.metadata_directory_id() {
            let id = strata_metadata::ids::Uuid128::from_bytes(*id.as_bytes());
            let (control, stop, auto_join) = (control.clone(), shutdown.clone(), cluster.auto_join);
            services.spawn(async move {
                control.clone().report_directory_id(id, stop.clone()).await;
                if auto_join {
                    control.join_as_voter(id, stop).await;
                }
            });
        }
        broker.set_quorum(Arc::new(control.clone()));
        broker.set_isr_change_sink(Arc::new(QuorumIsrSink {
            control: control.clone(),
        }));
        services.spawn(crate::controller::sync::run(
            control.clone(),
            broker.clone(),
            tiering.clone(),
            shutdown.clone(),
        ));
        control.register(shutdown).await?;
        control.wait_synced(0, FIRST_SYNC_LIMIT).await?;
        crate::controller::records::propose_pending_scram(broker, &control).await?;
        control.unfence_self().await?;
        anyhow::Ok(())
    };
    if let Err(e) = joined.await {
        control.shutdown(CLUSTER_SHUTDOWN_LIMIT).await;
        return Err(e.context("joining the cluster"));
    }
    let heartbeats = shutdown.child_token();
    services.spawn(control.clone().run_heartbeats(heartbeats.clone()));
    tracing::info!(
        node_id = broker.config.node_id,
        "joined the cluster: registered, synced and unfenced"
    );
    Ok(ClusterMembership {
        control,
        heartbeats,
    })
}

/// Binds every Kafka listener, then the admin listener. A listener on port 0 advertises the
/// port it actually got; bad TLS keys fail the start, not the first connection.
async fn bind_listeners(
    config: &mut BrokerConfig,
) -> anyhow::Result<(Vec<TcpListener>, TcpListener)> {
    let mut kafka_listeners = Vec::with_capacity(config.listeners.len());
    for l in config.listeners.iter_mut() {
        if let Some(t) = config.security.tls.get(&l.name) {
            crate::security::tls::acceptor(t).with_context(|| format!("listener {}", l.name))?;
        }
        let bind = l.bind;
        let socket = TcpListener::bind(bind)
            .await
            .with_context(|| format!("cannot listen on {bind} (listeners: {})", l.name))?;
        if l.advertised_port == 0 {
            l.advertised_port = socket.local_addr()?.port();
        }
        kafka_listeners.push(socket);
    }
    config.listener = config.listeners[0].clone();
    let admin_bind = config.admin_listener;
    let admin = TcpListener::bind(admin_bind)
        .await
        .with_context(|| format!("cannot listen on {admin_bind} (strata.admin.listener)"))?;
    Ok((kafka_listeners, admin))
}

/// Tiered storage, when enabled: opened, and an empty data dir restored from the bucket.
async fn open_tiering(config: &BrokerConfig) -> anyhow::Result<Option<Arc<Tiering>>> {
    if !config.tiering.enabled {
        return Ok(None);
    }
    let t = Tiering::open(&config.tiering)
        .await
        .context("opening tiered storage")?;
    let restored = crate::tiering::restore_if_empty(&t, config)
        .await
        .context("restoring topics from the bucket")?;
    if restored > 0 {
        tracing::info!(topics = restored, "restored topics from the bucket");
    }
    Ok(Some(t))
}

/// Opens the logs, binds the listeners and spawns the servers and background services.
pub async fn start(mut config: BrokerConfig) -> anyhow::Result<Running> {
    // Bind first: a listener on port 0 advertises the port it actually got, as Kafka does.
    let (kafka_listeners, admin) = bind_listeners(&mut config).await?;
    let kafka_addr = kafka_listeners[0].local_addr()?;
    let admin_addr = admin.local_addr()?;
    let tiering = open_tiering(&config).await?;
    let tiering2 = tiering.clone();
    let services = tokio::task::spawn_blocking(move || Services::open(config, tiering2))
        .await
        .context("broker start-up task")??;
    let mut services = services;
    let broker = services.broker.clone();
    // Tiered partitions take their log start offset from the manifest before anyone is
    // served (recovery rules: `crate::tiering`).
    if let Some(t) = &tiering {
        t.recover(&broker).await;
    }
    let shutdown = CancellationToken::new();
    let connections = TaskTracker::new();
    let tasks = TaskTracker::new();
    let cluster = match broker.config.cluster.clone() {
        Some(c) => match join_cluster(&broker, &c, &shutdown, &tasks, tiering.clone()).await {
            Ok(m) => {
                services.cluster = Some(m.control.clone());
                services.shares.persister.set_cluster(m.control.clone());
                Some(m)
            }
            Err(e) => {
                shutdown.cancel();
                tasks.close();
                tasks.wait().await;
                let b = broker.clone();
                let _ = tokio::task::spawn_blocking(move || b.close()).await;
                return Err(e);
            }
        },
        None => None,
    };
    let services = Arc::new(services);
    for (index, socket) in kafka_listeners.into_iter().enumerate() {
        tasks.spawn(crate::server::serve(
            socket,
            index,
            services.clone(),
            shutdown.clone(),
            connections.clone(),
        ));
    }
    tasks.spawn(crate::admin_http::serve(
        admin,
        services.clone(),
        shutdown.clone(),
        connections.clone(),
    ));
    spawn_background(&tasks, &shutdown, &broker, &services, tiering);
    tracing::info!(%kafka_addr, %admin_addr, node_id = broker.config.node_id, cluster_id = broker.cluster_id().unwrap_or_default(), "strata broker started");
    Ok(Running {
        broker,
        services,
        kafka_addr,
        admin_addr,
        shutdown,
        connections,
        tasks,
        cluster,
    })
}

/// The broker's background services: retention, checkpoints, coordinator and share-lock
/// timers, tiering, the cleaner, replication, token expiry, time-based flushes, and the
/// replica moves between log dirs a restart interrupted.
fn spawn_background(
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
    broker: &Arc<Broker>,
    services: &Arc<Services>,
    tiering: Option<Arc<crate::tiering::Tiering>>,
) {
    broker.resume_log_dir_moves();
    spawn_periodic(
        tasks,
        shutdown,
        Duration::from_millis(broker.config.log_retention_check_interval_ms),
        broker.clone(),
        "retention",
        |b| b.enforce_retention(),
    );
    spawn_periodic(
        tasks,
        shutdown,
        Duration::from_millis(broker.config.log_flush_offset_checkpoint_interval_ms),
        broker.clone(),
        "checkpoint",
        |b| {
            if let Err(e) = b.write_checkpoints() {
                tracing::error!(error = %e, "writing checkpoints failed");
            }
        },
    );
    // Every 50 ms, but only when a coordinator has work: an idle broker does not hand a
    // job to the blocking pool forty times a second.
    spawn_periodic_when(
        tasks,
        shutdown,
        Duration::from_millis(50),
        services.groups.clone(),
        "group-coordinator",
        |c| c.needs_tick(),
        |c| c.tick(),
    );
    spawn_periodic_when(
        tasks,
        shutdown,
        Duration::from_millis(50),
        services.txns.clone(),
        "transaction-coordinator",
        |c| c.needs_tick(),
        |c| c.tick(),
    );
    tasks.spawn(services.shares.dead_letters.clone().run(
        broker.clone(),
        tiering.clone(),
        shutdown.clone(),
    ));
    // Acquisition locks of share groups' records expire on this timer.
    spawn_periodic_when(
        tasks,
        shutdown,
        Duration::from_millis(100),
        services.shares.clone(),
        "share-locks",
        |s| s.needs_tick(),
        |s| s.tick(),
    );
    if let Some(t) = tiering {
        // Passes on its timer and whenever a partition's events ask for one.
        let b = broker.clone();
        let stop = shutdown.clone();
        tasks.spawn(async move { t.run(&b, stop).await });
    }
    if broker.config.log_cleaner.enable {
        tasks.spawn(crate::broker::log_cleaner::supervise(
            broker.clone(),
            tasks.clone(),
            shutdown.clone(),
        ));
    }
    tasks.spawn(crate::replication::run(
        broker.clone(),
        services.tiering.clone(),
        shutdown.clone(),
    ));
    let tokens = &broker.config.security.delegation_token;
    if tokens.secret_key.is_some() {
        spawn_periodic(
            tasks,
            shutdown,
            Duration::from_millis(tokens.expiry_check_interval_ms.max(1) as u64),
            broker.clone(),
            "delegation-token-expiry",
            |b| b.remove_expired_delegation_tokens(),
        );
    }
    let flush_every =
        Duration::from_millis(broker.config.log_flush_scheduler_interval_ms.min(1000));
    spawn_periodic(tasks, shutdown, flush_every, broker.clone(), "flush", |b| {
        b.flush_on_time()
    });
}

fn spawn_periodic<S: Send + Sync + 'static>(
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    every: Duration,
    service: Arc<S>,
    name: &'static str,
    job: fn(&S),
) {
    spawn_periodic_when(tracker, shutdown, every, service, name, |_| true, job);
}

/// Runs `job` on the blocking pool every `every`, at the ticks where `ready` (cheap and
/// non-blocking, run on the runtime) says there is work.
fn spawn_periodic_when<S: Send + Sync + 'static>(
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    every: Duration,
    service: Arc<S>,
    name: &'static str,
    ready: fn(&S) -> bool,
    job: fn(&S),
) {
    let shutdown = shutdown.clone();
    tracker.spawn(async move {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            if !ready(&service) {
                continue;
            }
            let s = service.clone();
            if tokio::task::spawn_blocking(move || job(&s)).await.is_err() {
                tracing::error!(job = name, "background job panicked");
            }
        }
    });
}

impl Running {
    /// Shuts down in order; returns once the logs are closed.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        tracing::info!("shutting down");
        if let Some(m) = &self.cluster {
            // Upload what this broker leads while its followers are still in sync (its high
            // watermark can cover everything rolled); after the controlled shutdown the new
            // leaders hold it, and the last broker of a stopping cluster may be under
            // min.insync.replicas, its high watermark stuck.
            if let Some(t) = &self.services.tiering {
                if tokio::time::timeout(Duration::from_secs(20), t.drain(&self.broker))
                    .await
                    .is_err()
                {
                    tracing::warn!("upload to remote storage before the controlled shutdown did not finish within 20s");
                }
            }
            m.heartbeats.cancel();
            m.control.controlled_shutdown(CLUSTER_SHUTDOWN_LIMIT).await;
        }
        self.shutdown.cancel();
        // Writes waiting for followers (a coordinator's, an acks=all produce's) would hold the
        // tasks and connections below for their whole timeout.
        self.broker.release_replication_waiters();
        self.tasks.close();
        self.connections.close();
        if tokio::time::timeout(Duration::from_secs(10), self.connections.wait())
            .await
            .is_err()
        {
            tracing::warn!("connections still busy after 10s; closing logs anyway");
        }
        if tokio::time::timeout(Duration::from_secs(30), self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("background services did not stop within 30s");
        }
        if let Some(t) = &self.services.tiering {
            // Seal and upload what remote topics still hold only locally, so the bucket alone
            // has every acknowledged record (bounded; a restart uploads the rest).
            if tokio::time::timeout(Duration::from_secs(20), t.drain(&self.broker))
                .await
                .is_err()
            {
                tracing::warn!("final upload to remote storage did not finish within 20s");
            }
            // Running Parquet exports stop at their next batch; checkpoints say where to resume.
            if tokio::time::timeout(Duration::from_secs(10), t.exporter.shutdown())
                .await
                .is_err()
            {
                tracing::warn!("Parquet export did not stop within 10s");
            }
        }
        let b = self.broker.clone();
        tokio::task::spawn_blocking(move || b.close())
            .await
            .context("close task")?
            .context("closing logs")?;
        if let Some(m) = &self.cluster {
            m.control.shutdown(CLUSTER_SHUTDOWN_LIMIT).await;
        }
        tracing::info!("shutdown complete");
        Ok(())
    }

    /// Cancels the broker from elsewhere (tests).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}
