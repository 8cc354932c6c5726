//! EndTxn: commits or aborts the producer's transaction. The answer comes once
//! PrepareCommit/PrepareAbort is durable and the markers have been attempted; v5+ clients
//! (KIP-890 part 2) get the bumped epoch back.

use std::sync::Arc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, RequestKind, ResponseKind};
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, TXN_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::coordinator::txn::TransactionCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(
    txns: &Arc<TransactionCoordinator>,
    req: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let base = EndTxnResponse::default()
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    let c = txns.clone();
    // Kafka: EndTxn v5+ means the client uses transaction version 2.
    let client_tv = if version > 4 { 2 } else { 0 };
    let txn_id = req.transactional_id.0.to_string();
    let (pid, epoch, commit) = (req.producer_id.0, req.producer_epoch, req.committed);
    let result = blocking(move || c.end_txn(&txn_id, pid, epoch, commit, client_tv))
        .await
        .unwrap_or(Err(ResponseError::UnknownServerError));
    match result {
        Ok((pid, epoch)) => base.with_producer_id(pid.into()).with_producer_epoch(epoch),
        // Clients before v2 do not know PRODUCER_FENCED.
        Err(ResponseError::ProducerFenced) if version < 2 => {
            base.with_error_code(ResponseError::InvalidProducerEpoch.code())
        }
        Err(e) => base.with_error_code(e.code()),
    }
}

/// EndTxn: WRITE on the transactional id.
pub struct EndTxn;

impl Api for EndTxn {
    type Request = EndTxnRequest;

    fn authorize(who: &Who, r: EndTxnRequest, _version: i16) -> Gate {
        if !who.may(Op::Write, Res::TransactionalId, &r.transactional_id) {
            return Gate::Answer(ResponseKind::EndTxn(
                EndTxnResponse::default()
                    .with_error_code(TXN_DENIED.code())
                    .with_producer_id((-1).into())
                    .with_producer_epoch(-1),
            ));
        }
        Gate::Run(RequestKind::EndTxn(r), None)
    }

    async fn handle(s: &Services, _ctx: &Context, r: EndTxnRequest, version: i16) -> Outcome {
        Outcome::respond(handle(&s.txns, r, version).await)
    }
}
