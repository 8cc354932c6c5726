//! InitProducerId: a fresh producer id with epoch 0 for an idempotent producer; for a
//! transactional id, the transaction coordinator's id and bumped epoch (fencing zombies).

use std::sync::Arc;

use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED, TXN_DENIED};
use crate::api::{blocking, Api, Context, Outcome};
use crate::broker::Broker;
use crate::coordinator::txn::TransactionCoordinator;
use crate::security::acl::{Operation as Op, ResourceType as Res};
use crate::services::Services;

pub async fn handle(
    broker: Arc<Broker>,
    txns: &Arc<TransactionCoordinator>,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let base = InitProducerIdResponse::default()
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    if let Some(txn_id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) {
        if txn_id.is_empty() {
            return base.with_error_code(ResponseError::InvalidRequest.code());
        }
        let expected = match (req.producer_id.0, req.producer_epoch) {
            (-1, -1) => None,
            (-1, _) | (_, -1) => {
                return base.with_error_code(ResponseError::InvalidRequest.code());
            }
            (pid, epoch) => Some((pid, epoch)),
        };
        let c = txns.clone();
        let timeout = req.transaction_timeout_ms;
        let result = blocking(move || c.init_producer_id(&txn_id, timeout, expected))
            .await
            .unwrap_or(Err(ResponseError::UnknownServerError));
        return match result {
            Ok((pid, epoch)) => base.with_producer_id(pid.into()).with_producer_epoch(epoch),
            // Clients before v4 do not know PRODUCER_FENCED.
            Err(ResponseError::ProducerFenced) if version < 4 => {
                base.with_error_code(ResponseError::InvalidProducerEpoch.code())
            }
            Err(e) => base.with_error_code(e.code()),
        };
    }
    let b = broker.clone();
    match blocking(move || b.allocate_producer_id()).await {
        Ok(Ok(id)) => base.with_producer_id(id.into()).with_producer_epoch(0),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot persist producer id block");
            base.with_error_code(ResponseError::KafkaStorageError.code())
        }
        Err(_) => base.with_error_code(ResponseError::UnknownServerError.code()),
    }
}

/// InitProducerId: WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the
/// cluster or WRITE on any topic.
pub struct InitProducerId;

impl Api for InitProducerId {
    type Request = InitProducerIdRequest;

    fn authorize(who: &Who, r: InitProducerIdRequest, _version: i16) -> Gate {
        let refusal = match &r.transactional_id {
            Some(txn) => (!who.may(Op::Write, Res::TransactionalId, txn)).then_some(TXN_DENIED),
            None => (!who.may_cluster(Op::IdempotentWrite)
                && !who.broker.authorizer.authorize_any(
                    &who.principal,
                    &who.host,
                    Op::Write,
                    Res::Topic,
                ))
            .then_some(CLUSTER_DENIED),
        };
        match refusal {
            Some(code) => Gate::Answer(ResponseKind::InitProducerId(
                InitProducerIdResponse::default()
                    .with_error_code(code.code())
                    .with_producer_id((-1).into())
                    .with_producer_epoch(-1),
            )),
            None => Gate::Run(RequestKind::InitProducerId(r), None),
        }
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: InitProducerIdRequest,
        version: i16,
    ) -> Outcome {
        Outcome::respond(handle(s.broker.clone(), &s.txns, r, version).await)
    }
}
