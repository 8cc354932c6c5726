//! AddOffsetsToTxn: adds the group's `__consumer_offsets` partition to the transaction, so
//! the commit or abort marker reaches the group's transactional offsets.

use std::sync::Arc;

use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::offsets_topic::partition_for;
use crate::coordinator::txn::TransactionCoordinator;
use crate::coordinator::OFFSETS_TOPIC;
use crate::services::Services;

/// The group's `__consumer_offsets` partition (the topic may not exist yet).
pub fn offsets_partition(broker: &Broker, group: &str) -> i32 {
    let n = broker
        .topic(OFFSETS_TOPIC)
        .map(|t| t.partitions.len() as i32)
        .unwrap_or(broker.config.offsets_topic_num_partitions);
    partition_for(group, n)
}

pub async fn handle(
    broker: Arc<Broker>,
    txns: &Arc<TransactionCoordinator>,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let respond = |e: Option<ResponseError>| {
        let e = match e {
            Some(ResponseError::ProducerFenced) if version < 2 => {
                Some(ResponseError::InvalidProducerEpoch)
            }
            e => e,
        };
        AddOffsetsToTxnResponse::default().with_error_code(e.map_or(0, |e| e.code()))
    };
    let c = txns.clone();
    let partition = offsets_partition(&broker, req.group_id.0.as_str());
    let txn_id = req.transactional_id.0.to_string();
    let (pid, epoch) = (req.producer_id.0, req.producer_epoch);
    let result = blocking(move || {
        c.add_partitions(
            &txn_id,
            pid,
            epoch,
            vec![(OFFSETS_TOPIC.to_string(), partition)],
            0, // as Kafka: a TV2 client commits offsets without AddOffsetsToTxn
        )
    })
    .await
    .unwrap_or(Err(ResponseError::UnknownServerError));
    respond(result.err())
}

/// AddOffsetsToTxn: WRITE on the transactional id, then READ on the group.
pub struct AddOffsetsToTxn;

impl Api for AddOffsetsToTxn {
    type Request = AddOffsetsToTxnRequest;

    fn authorize(who: &Who, r: AddOffsetsToTxnRequest, _version: i16) -> Gate {
        match who.txn_group_refusal(&r.transactional_id, &r.group_id) {
            Some(code) => Gate::Answer(ResponseKind::AddOffsetsToTxn(
                AddOffsetsToTxnResponse::default().with_error_code(code.code()),
            )),
            None => Gate::Run(RequestKind::AddOffsetsToTxn(r), None),
        }
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: AddOffsetsToTxnRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), &s.txns, r, version).await)
    }
}
