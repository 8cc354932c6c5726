//! State-machine tests with deterministic time: no I/O, no sleeping.

use super::*;

fn req(member_id: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        group_instance_id: instance.map(str::to_string),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(30),
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(p.to_string())))
            .collect(),
        require_known_member_id: true,
    }
}

/// Joins and returns the immediate answer or the parked receiver.
fn join(
    g: &mut Group,
    r: JoinRequest,
    now: Instant,
) -> Result<JoinResult, oneshot::Receiver<JoinResult>> {
    let (tx, rx) = oneshot::channel();
    match g.join(r, tx, now, 0) {
        Some((_, result)) => Ok(result),
        None => Err(rx),
    }
}

/// A dynamic member's two-step join (MEMBER_ID_REQUIRED, then join with the id).
fn join_new(g: &mut Group, now: Instant) -> (String, oneshot::Receiver<JoinResult>) {
    let first = join(g, req("", None, &["range"]), now)
        .ok()
        .expect("MEMBER_ID_REQUIRED answers at once");
    assert_eq!(first.error, Some(ResponseError::MemberIdRequired));
    let rx = join(g, req(&first.member_id, None, &["range"]), now)
        .err()
        .expect("second join parks");
    (first.member_id, rx)
}

/// The broker's timer period (`GroupCoordinator::tick` runs every 50 ms).
const TICK: Duration = Duration::from_millis(50);

/// Runs the timer until a new group's join phase can end with no initial delay: one run
/// inside the quiet spell after the last arrival, one after it. Returns the time after.
fn settle(g: &mut Group, now: Instant) -> Instant {
    g.tick(now + TICK, 0);
    g.tick(now + NEW_GROUP_QUIET + TICK, 0);
    now + NEW_GROUP_QUIET + TICK
}

fn sync(
    g: &mut Group,
    member: &str,
    generation: i32,
    assignments: Vec<(String, Bytes)>,
    now: Instant,
) -> Result<SyncResult, oneshot::Receiver<SyncResult>> {
    let (tx, rx) = oneshot::channel();
    match g
        .sync(member, None, generation, None, None, assignments, tx, now)
        .0
    {
        Some((_, r)) => Ok(r),
        None => Err(rx),
    }
}

#[test]
fn two_members_form_a_generation_and_sync_the_leaders_assignment() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (a, mut rx_a) = join_new(&mut g, t0);
    // With no initial delay the single member's join completes on the timer.
    assert!(
        rx_a.try_recv().is_err(),
        "a new group's join ends on the timer"
    );
    settle(&mut g, t0);
    let ja = rx_a.try_recv().expect("a's join completes");
    assert_eq!((ja.generation, ja.leader.as_str()), (1, a.as_str()));
    // b arrives: rebalance; a must rejoin.
    let (b, mut rx_b) = join_new(&mut g, t0);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert!(rx_b.try_recv().is_err());
    let mut rx_a = join(&mut g, req(&a, None, &["range"]), t0).err().unwrap();
    let ja = rx_a.try_recv().unwrap();
    let jb = rx_b.try_recv().unwrap();
    assert_eq!((ja.generation, jb.generation), (2, 2));
    assert_eq!(ja.members.len(), 2, "the leader gets the member list");
    assert!(jb.members.is_empty());
    let mut rx_sb = sync(&mut g, &b, 2, vec![], t0).err().unwrap();
    let sa = sync(
        &mut g,
        &a,
        2,
        vec![
            (a.clone(), Bytes::from_static(b"A")),
            (b.clone(), Bytes::from_static(b"B")),
        ],
        t0,
    );
    assert!(
        sa.is_err(),
        "the leader's own sync is answered through its channel"
    );
    assert_eq!(
        rx_sb.try_recv().unwrap().assignment,
        Bytes::from_static(b"B")
    );
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.heartbeat(&a, None, 2, t0), None);
    assert_eq!(
        g.heartbeat(&a, None, 1, t0),
        Some(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.heartbeat("nobody", None, 2, t0),
        Some(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_silent_member_is_evicted_after_its_session_timeout() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (a, mut rx) = join_new(&mut g, t0);
    settle(&mut g, t0);
    rx.try_recv().unwrap();
    sync(&mut g, &a, 1, vec![(a.clone(), Bytes::new())], t0)
        .err()
        .unwrap();
    assert!(!g.tick(t0 + Duration::from_secs(9), 0));
    assert!(g.tick(t0 + Duration::from_secs(11), 0));
    assert_eq!(g.state, GroupState::Empty);
    assert!(g.members.is_empty());
}

#[test]
fn a_crashed_member_is_dropped_at_its_session_timeout_during_a_rebalance() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (a, mut rx) = join_new(&mut g, t0);
    settle(&mut g, t0);
    rx.try_recv().unwrap();
    sync(&mut g, &a, 1, vec![], t0).err().unwrap();
    // a crashes (no more heartbeats); b joins and starts a rebalance.
    let (_b, mut rx_b) = join_new(&mut g, t0 + Duration::from_secs(1));
    assert!(!g.tick(t0 + Duration::from_secs(9), 0));
    assert!(rx_b.try_recv().is_err(), "a's session is still alive");
    // Session timeout (10 s), not the rebalance timeout (30 s), ends a's membership.
    assert!(g.tick(t0 + Duration::from_secs(11), 0));
    let jb = rx_b.try_recv().unwrap();
    assert_eq!(jb.generation, 2);
    assert_eq!(g.members.len(), 1);
}

#[test]
fn a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (a, mut rx) = join_new(&mut g, t0);
    settle(&mut g, t0);
    rx.try_recv().unwrap();
    sync(&mut g, &a, 1, vec![], t0).err().unwrap();
    let (_b, mut rx_b) = join_new(&mut g, t0 + Duration::from_secs(1));
    assert!(rx_b.try_recv().is_err());
    // a keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins.
    assert_eq!(
        g.heartbeat(&a, None, 1, t0 + Duration::from_secs(2)),
        Some(ResponseError::RebalanceInProgress)
    );
    g.tick(t0 + Duration::from_secs(32), 0);
    let jb = rx_b.try_recv().unwrap();
    assert_eq!(jb.generation, 2);
    assert_eq!(g.members.len(), 1);
}

#[test]
fn a_static_member_rejoining_a_stable_group_gets_its_assignment_without_a_rebalance() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let mut rx = join(&mut g, req("", Some("i1"), &["range"]), t0)
        .err()
        .unwrap();
    settle(&mut g, t0);
    let j = rx.try_recv().unwrap();
    let old = j.member_id.clone();
    sync(
        &mut g,
        &old,
        1,
        vec![(old.clone(), Bytes::from_static(b"mine"))],
        t0,
    )
    .err()
    .unwrap();
    assert_eq!(g.state, GroupState::Stable);
    // Restart: unknown member id, same instance id.
    let j2 = join(
        &mut g,
        req("", Some("i1"), &["range"]),
        t0 + Duration::from_secs(1),
    )
    .ok()
    .expect("answered at once");
    assert_eq!(j2.generation, 1, "no new generation");
    assert_ne!(j2.member_id, old);
    assert_eq!(g.state, GroupState::Stable);
    let s = sync(&mut g, &j2.member_id, 1, vec![], t0).ok().unwrap();
    assert_eq!(s.assignment, Bytes::from_static(b"mine"));
    // The old incarnation is fenced.
    assert_eq!(
        g.heartbeat(&old, Some("i1"), 1, t0),
        Some(ResponseError::FencedInstanceId)
    );
}

#[test]
fn the_initial_delay_holds_the_first_join_and_grows_with_new_members() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::from_secs(3));
    let (_a, mut rx_a) = join_new(&mut g, t0);
    assert!(rx_a.try_recv().is_err());
    let (_b, mut rx_b) = join_new(&mut g, t0 + Duration::from_secs(2));
    g.tick(t0 + Duration::from_secs(4), 0);
    assert!(rx_a.try_recv().is_err(), "b's arrival extended the delay");
    g.tick(t0 + Duration::from_millis(5100), 0);
    assert_eq!(rx_a.try_recv().unwrap().generation, 1);
    assert_eq!(rx_b.try_recv().unwrap().generation, 1);
}

#[test]
fn with_no_initial_delay_a_member_that_joins_just_after_the_first_shares_generation_1() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (_a, mut rx_a) = join_new(&mut g, t0);
    assert!(rx_a.try_recv().is_err(), "not ended inside a's JoinGroup");
    // Timer runs inside the quiet spell after a's arrival do not end the phase.
    assert!(!g.tick(t0 + TICK, 0));
    assert!(!g.tick(t0 + NEW_GROUP_QUIET - Duration::from_millis(1), 0));
    assert!(rx_a.try_recv().is_err());
    // b started with a but librdkafka held its JoinGroup back ~55 ms (its sparse-connection
    // interval): it is in before the phase ends, and its arrival starts a new quiet spell.
    let b_at = t0 + Duration::from_millis(55);
    let (_b, mut rx_b) = join_new(&mut g, b_at);
    g.tick(t0 + NEW_GROUP_QUIET + Duration::from_millis(1), 0);
    assert!(
        rx_a.try_recv().is_err(),
        "b's arrival extends the join phase"
    );
    assert!(g.tick(b_at + NEW_GROUP_QUIET, 0));
    let (ja, jb) = (rx_a.try_recv().unwrap(), rx_b.try_recv().unwrap());
    assert_eq!((ja.generation, jb.generation), (1, 1));
    assert_eq!(
        ja.members.len() + jb.members.len(),
        2,
        "the leader sees both"
    );
}

#[test]
fn only_a_new_groups_first_join_phase_waits_for_the_quiet_spell() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (a, mut rx_a) = join_new(&mut g, t0);
    let t = settle(&mut g, t0);
    assert_eq!(rx_a.try_recv().unwrap().generation, 1);
    // A rebalance of a stable group ends as soon as every member rejoined: a's rejoin with
    // new metadata ends it inside the JoinGroup, with no timer run.
    let mut rx = join(&mut g, req(&a, None, &["range", "roundrobin"]), t)
        .err()
        .expect("parks until the join phase ends");
    assert_eq!(rx.try_recv().unwrap().generation, 2);
}

#[test]
fn a_new_groups_join_phase_waits_for_a_member_given_an_id_until_its_session_timeout() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (_a, mut rx_a) = join_new(&mut g, t0);
    // b got its member id (MEMBER_ID_REQUIRED) but has not joined with it yet.
    let first = join(&mut g, req("", None, &["range"]), t0)
        .ok()
        .expect("MEMBER_ID_REQUIRED");
    assert_eq!(first.error, Some(ResponseError::MemberIdRequired));
    let t = settle(&mut g, t0);
    g.tick(t + Duration::from_secs(5), 0);
    assert!(rx_a.try_recv().is_err(), "b is awaited");
    // b never comes back: its pending id expires with the session timeout (10 s).
    g.tick(t0 + Duration::from_millis(10_050), 0);
    let ja = rx_a.try_recv().unwrap();
    assert_eq!((ja.generation, ja.members.len()), (1, 1));
}

#[test]
fn commits_are_fenced_by_generation_and_membership() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    assert_eq!(
        g.check_commit("", None, -1),
        None,
        "simple commit to an empty group"
    );
    let (a, mut rx) = join_new(&mut g, t0);
    settle(&mut g, t0);
    rx.try_recv().unwrap();
    assert_eq!(
        g.check_commit(&a, None, 1),
        Some(ResponseError::RebalanceInProgress)
    );
    sync(&mut g, &a, 1, vec![], t0).err().unwrap();
    assert_eq!(g.check_commit(&a, None, 1), None);
    assert_eq!(
        g.check_commit(&a, None, 0),
        Some(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.check_commit("x", None, 1),
        Some(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.check_commit("", None, -1),
        Some(ResponseError::UnknownMemberId)
    );
}

#[test]
fn leaving_empties_the_group() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let (a, mut rx) = join_new(&mut g, t0);
    settle(&mut g, t0);
    rx.try_recv().unwrap();
    assert_eq!(g.leave(&a, None, t0, 0), None);
    assert_eq!(g.state, GroupState::Empty);
    assert_eq!(
        g.leave(&a, None, t0, 0),
        Some(ResponseError::UnknownMemberId)
    );
}

#[test]
fn persisted_metadata_restores_a_stable_group() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let mut rx = join(&mut g, req("", Some("i1"), &["range"]), t0)
        .err()
        .unwrap();
    settle(&mut g, t0);
    let a = rx.try_recv().unwrap().member_id;
    sync(
        &mut g,
        &a,
        1,
        vec![(a.clone(), Bytes::from_static(b"x"))],
        t0,
    )
    .err()
    .unwrap();
    let v = g.to_value();
    let mut r = Group::new("g", t0, 0, Duration::ZERO);
    r.restore(v, t0);
    assert_eq!(r.state, GroupState::Stable);
    assert_eq!(r.heartbeat(&a, Some("i1"), 1, t0), None);
    assert_eq!(
        sync(&mut r, &a, 1, vec![], t0).ok().unwrap().assignment,
        Bytes::from_static(b"x")
    );
}

#[test]
fn a_static_member_rejoining_with_new_metadata_for_the_same_protocol_does_not_rebalance() {
    let t0 = Instant::now();
    let mut g = Group::new("g", t0, 0, Duration::ZERO);
    let mut rx = join(&mut g, req("", Some("i1"), &["range", "roundrobin"]), t0)
        .err()
        .unwrap();
    settle(&mut g, t0);
    let old = rx.try_recv().unwrap().member_id;
    sync(
        &mut g,
        &old,
        1,
        vec![(old.clone(), Bytes::from_static(b"mine"))],
        t0,
    )
    .err()
    .unwrap();
    let mut r = req("", Some("i1"), &["range", "roundrobin"]);
    r.protocols[0].1 = Bytes::from_static(b"owned partitions and generation differ");
    let j = join(&mut g, r, t0).ok().expect("answered at once");
    assert_eq!((j.generation, g.state), (1, GroupState::Stable));
    // Preferring another protocol changes the vote: that is a real change.
    let mut rx = join(&mut g, req("", Some("i1"), &["roundrobin", "range"]), t0)
        .err()
        .expect("parks for a rebalance");
    let j = rx
        .try_recv()
        .expect("the lone member completes the rebalance");
    assert_eq!(
        (j.generation, j.protocol_name.as_deref()),
        (2, Some("roundrobin"))
    );
}
