//! InitProducerId for idempotent producers: a fresh producer id with epoch 0. Transactional
//! ids need the transaction coordinator, which this broker does not run yet.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};
use kafka_protocol::ResponseError;

use crate::api::blocking;
use crate::broker::Broker;

pub async fn handle(broker: Arc<Broker>, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let base = InitProducerIdResponse::default()
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    if req
        .transactional_id
        .as_ref()
        .is_some_and(|t| t.0.is_empty())
    {
        return base.with_error_code(ResponseError::InvalidRequest.code());
    }
    if req.transactional_id.is_some() {
        return base.with_error_code(ResponseError::CoordinatorNotAvailable.code());
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
