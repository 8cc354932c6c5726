use super::*;

fn props(s: &str) -> BTreeMap<String, String> {
    parse_properties(s, Path::new("server.properties")).unwrap()
}

#[test]
fn bootstrap_servers_alone_make_a_node_that_joins_an_existing_quorum() {
    let c = BrokerConfig::build(&[props(
        "node.id=4
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
\
         controller.listener.names=CONTROLLER
\
         controller.quorum.bootstrap.servers=10.0.0.1:9093, 10.0.0.2:9093
",
    )])
    .unwrap();
    let cluster = c.cluster.expect("cluster mode");
    assert!(cluster.voters.is_empty());
    assert_eq!(
        cluster.bootstrap_servers,
        ["10.0.0.1:9093", "10.0.0.2:9093"]
    );
    assert_eq!(cluster.rpc_advertised, "127.0.0.1:9093");
    for bad in [
        "node.id=4\ncontroller.listener.names=CONTROLLER\n\
         listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n\
         controller.quorum.bootstrap.servers=10.0.0.1\n",
        // A joining node needs a controller listener to be reached at.
        "node.id=4\ncontroller.quorum.bootstrap.servers=10.0.0.1:9093\n",
    ] {
        assert!(BrokerConfig::build(&[props(bad)]).is_err(), "{bad}");
    }
}

#[test]
fn cluster_mode_needs_voters_and_binds_the_controller_listener() {
    let c = BrokerConfig::build(&[]).unwrap();
    assert!(c.cluster.is_none(), "no voters: single node");

    let c = BrokerConfig::build(&[props(
        "process.roles=broker,controller\nnode.id=2\n\
         listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n\
         controller.listener.names=CONTROLLER\n\
         controller.quorum.voters=1@10.0.0.1:9093,2@10.0.0.2:9093,3@10.0.0.3:9093\n\
         log.dirs=/data/a,/data/b\n",
    )])
    .unwrap();
    assert_eq!(
        c.listeners.len(),
        1,
        "the controller listener is not Kafka protocol"
    );
    let cluster = c.cluster.expect("cluster mode");
    assert_eq!(cluster.voters.len(), 3);
    assert_eq!(cluster.rpc_bind.port(), 9093);
    assert_eq!(cluster.rpc_advertised, "10.0.0.2:9093");
    assert_eq!(
        cluster.metadata_log_dir,
        PathBuf::from("/data/a/__cluster_metadata")
    );
    assert_eq!(cluster.session_timeout.as_millis(), 9000);
    assert_eq!(cluster.heartbeat_interval.as_millis(), 2000);
    assert_eq!(
        cluster.leader_imbalance_check_interval,
        Some(std::time::Duration::from_secs(300))
    );

    // A voter without a controller listener binds its voter entry.
    let c = BrokerConfig::build(&[props(
        "node.id=1\ncontroller.quorum.voters=1@127.0.0.1:9193\nmetadata.log.dir=/m\n\
         auto.leader.rebalance.enable=false\n",
    )])
    .unwrap();
    let cluster = c.cluster.expect("cluster mode");
    assert_eq!(cluster.rpc_bind.port(), 9193);
    assert_eq!(cluster.metadata_log_dir, PathBuf::from("/m"));
    assert_eq!(cluster.leader_imbalance_check_interval, None);

    for bad in [
        "controller.quorum.voters=1@h\n",
        "node.id=4\ncontroller.quorum.voters=1@127.0.0.1:9193\n",
        "node.id=1\ncontroller.quorum.voters=1@127.0.0.1:9193\nprocess.roles=observer\n",
        "node.id=1\ncontroller.quorum.voters=1@127.0.0.1:9193\nbroker.heartbeat.interval.ms=9000\n",
        "node.id=1\ncontroller.quorum.voters=1@127.0.0.1:9193\nleader.imbalance.check.interval.seconds=0\n",
    ] {
        assert!(BrokerConfig::build(&[props(bad)]).is_err(), "{bad}");
    }
}

#[test]
fn zero_config_is_a_local_broker() {
    let c = BrokerConfig::build(&[]).unwrap();
    assert_eq!(c.listener.bind, "127.0.0.1:9092".parse().unwrap());
    assert_eq!(
        (
            c.listener.advertised_host.as_str(),
            c.listener.advertised_port
        ),
        ("127.0.0.1", 9092)
    );
    assert_eq!(c.log_dirs, vec![PathBuf::from("./strata-data")]);
    assert!(c.auto_create_topics_enable);
}

#[test]
fn kafka_server_properties_carry_over() {
    let p = props(
        "# Kafka config\nprocess.roles=broker,controller\nnode.id=3\nlisteners=PLAINTEXT://:19092\n\
         advertised.listeners=PLAINTEXT://kafka-1.example:19092\nlog.dirs=/a,/b\nlog.retention.hours=24\n\
         num.partitions=6\nlog.segment.bytes=1048576\n",
    );
    let c = BrokerConfig::build(&[p]).unwrap();
    assert_eq!(c.node_id, 3);
    assert_eq!(c.listener.bind.port(), 19092);
    assert_eq!(c.listener.advertised_host, "kafka-1.example");
    assert_eq!(c.log_dirs.len(), 2);
    let t = c.topic_config(&BTreeMap::new());
    assert_eq!(t.retention_ms, 86_400_000);
    assert_eq!(t.segment_bytes, 1_048_576);
}

#[test]
fn toml_nested_keys_flatten_to_kafka_names() {
    let t = parse_toml(
        "listeners = \"PLAINTEXT://127.0.0.1:1\"\n[log]\nretention.ms = \"3d\"\ndirs = [\"/x\"]\n",
        Path::new("s.toml"),
    )
    .unwrap();
    assert_eq!(t.get("log.retention.ms").unwrap(), "3d");
    assert_eq!(t.get("log.dirs").unwrap(), "/x");
    let c = BrokerConfig::build(&[t]).unwrap();
    assert_eq!(
        c.topic_config(&BTreeMap::new()).retention_ms,
        3 * 86_400_000
    );
}

#[test]
fn bad_values_name_the_key() {
    let e = BrokerConfig::build(&[props("num.partitions=zero\n")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("num.partitions"), "{e}");
    let e = BrokerConfig::build(&[props("log.cleanup.policy=forever\n")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("log.cleanup.policy"), "{e}");
    let e = BrokerConfig::build(&[props("strata.admin.listenr=1\n")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("strata.admin.listenr"), "{e}");
    let e = BrokerConfig::build(&[props("listeners=PLAINTEXT://127.0.0.1:notaport\n")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("listeners"), "{e}");
}

#[test]
fn log_cleaner_settings_take_kafka_names_and_defaults() {
    let c = BrokerConfig::build(&[]).unwrap().log_cleaner;
    assert!(c.enable);
    assert_eq!(c.threads, 1);
    assert_eq!(c.dedupe_buffer_bytes, 128 << 20);
    assert_eq!(c.dedupe_buffer_load_factor, 0.9);
    assert_eq!(c.io_max_bytes_per_second, f64::MAX);
    assert_eq!(c.backoff, std::time::Duration::from_secs(15));
    let c = BrokerConfig::build(&[props(
        "log.cleaner.enable=false\nlog.cleaner.threads=3\nlog.cleaner.dedupe.buffer.size=1MiB\n\
         log.cleaner.io.max.bytes.per.second=1048576\nlog.cleaner.backoff.ms=2s\n",
    )])
    .unwrap()
    .log_cleaner;
    assert!(!c.enable);
    assert_eq!((c.threads, c.dedupe_buffer_bytes), (3, 1 << 20));
    assert_eq!(c.io_max_bytes_per_second, 1048576.0);
    assert_eq!(c.backoff, std::time::Duration::from_secs(2));
    for bad in [
        "log.cleaner.io.buffer.load.factor=1.5\n",
        "log.cleaner.threads=-1\n",
        "log.cleaner.dedupe.buffer.size=0\n",
    ] {
        let e = BrokerConfig::build(&[props(bad)]).unwrap_err().to_string();
        assert!(e.contains(bad.split('=').next().unwrap()), "{e}");
    }
}

#[test]
fn quota_and_connection_limit_settings_take_kafka_names_and_defaults() {
    let c = BrokerConfig::build(&[]).unwrap();
    assert_eq!(c.quota_sample, crate::quota::SampleConfig::DEFAULT);
    let l = &c.connection_limits;
    assert_eq!(
        (l.max_per_ip, l.max_connections, l.max_creation_rate),
        (i32::MAX, i32::MAX, i32::MAX)
    );
    let c = BrokerConfig::build(&[props(
        "max.connections.per.ip=0\nmax.connections.per.ip.overrides=127.0.0.1:3,10.0.0.1:0\n\
         quota.window.num=5\nquota.window.size.seconds=2\nmax.connections=100\n",
    )])
    .unwrap();
    assert_eq!(c.quota_sample.samples, 5);
    assert_eq!(c.quota_sample.window_ms, 2000);
    let l = &c.connection_limits;
    assert_eq!(l.per_ip_overrides[&"127.0.0.1".parse().unwrap()], 3);
    assert_eq!(l.max_connections, 100);
    for bad in [
        "max.connections.per.ip=0\n",
        "max.connections.per.ip.overrides=127.0.0.1\n",
        "max.connections=-1\n",
        "quota.window.num=0\n",
    ] {
        let e = BrokerConfig::build(&[props(bad)]).unwrap_err().to_string();
        assert!(e.contains(bad.split('=').next().unwrap()), "{e}");
    }
}

#[test]
fn later_layers_win_and_env_maps_to_kafka_names() {
    let env = from_env(
        vec![
            ("STRATA_LOG_DIRS".to_string(), "/env".to_string()),
            ("STRATA_BIN".into(), "x".into()),
            ("STRATA_ADMIN_LISTENER".into(), "127.0.0.1:1".into()),
        ]
        .into_iter(),
    );
    assert_eq!(env.get("log.dirs").unwrap(), "/env");
    assert_eq!(env.get("strata.admin.listener").unwrap(), "127.0.0.1:1");
    assert!(!env.contains_key("bin"));
    let flags = parse_overrides(&["log.dirs=/flag".to_string()]).unwrap();
    let c = BrokerConfig::build(&[props("log.dirs=/file\n"), env, flags]).unwrap();
    assert_eq!(c.log_dirs, vec![PathBuf::from("/flag")]);
}

#[test]
fn queued_max_request_bytes_is_bounded_by_default_and_must_hold_the_largest_request() {
    let c = BrokerConfig::build(&[]).unwrap();
    assert_eq!(c.queued_max_request_bytes, Some(512 << 20));
    assert_eq!(c.sasl_server_max_receive_size, 524288);
    for unbounded in ["-1", "0"] {
        let c = BrokerConfig::build(&[props(&format!("queued.max.request.bytes={unbounded}\n"))])
            .unwrap();
        assert_eq!(c.queued_max_request_bytes, None, "{unbounded}");
    }
    let c = BrokerConfig::build(&[props(
        "queued.max.request.bytes=1MiB\nsocket.request.max.bytes=1MiB\n",
    )])
    .unwrap();
    assert_eq!(c.queued_max_request_bytes, Some(1 << 20));
    for bad in [
        "queued.max.request.bytes=-2\n",
        // The default socket.request.max.bytes (100 MiB) does not fit in 1 MiB.
        "queued.max.request.bytes=1MiB\n",
        "socket.request.max.bytes=1000\nqueued.max.request.bytes=999\n",
        "sasl.server.max.receive.size=0\n",
    ] {
        let e = BrokerConfig::build(&[props(bad)]).err();
        assert!(e.is_some(), "{bad}");
    }
}

#[test]
fn cluster_id_is_optional_and_must_read_back_from_meta_properties() {
    assert_eq!(BrokerConfig::build(&[]).unwrap().cluster_id, None);
    let c = BrokerConfig::build(&[props("cluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")]).unwrap();
    assert_eq!(c.cluster_id.as_deref(), Some("MkU3OEVBNTcwNTJENDM2Qk"));
    assert_eq!(
        BrokerConfig::build(&[props("cluster.id=\n")])
            .unwrap()
            .cluster_id,
        None
    );
    for bad in ["two words", "a=b", "x\\y"] {
        let mut m = BTreeMap::new();
        m.insert("cluster.id".to_string(), bad.to_string());
        let err = BrokerConfig::build(&[m]).err().expect(bad).to_string();
        assert!(err.contains("cluster.id"), "{bad}: {err}");
    }
}
