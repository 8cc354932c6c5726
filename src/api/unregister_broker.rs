//! UnregisterBroker (`kafka-cluster.sh unregister --id N`): forgets a broker's registration,
//! for a broker taken out of the cluster. In cluster mode the broker is fenced, its
//! partitions' leadership and ISR membership move away, then its registration is removed; a
//! broker still running registers again at its next heartbeat, as in Kafka. A single node is
//! its own cluster: unregistering itself changes nothing (it is registered again at once, as
//! a Kafka broker would be), any other id is unknown.

use kafka_protocol::messages::{
    RequestKind, ResponseKind, UnregisterBrokerRequest, UnregisterBrokerResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use strata_metadata::ids::BrokerId;

use crate::api::gate::{Gate, Who, CLUSTER_DENIED};
use crate::api::{Api, Context, Outcome};
use crate::security::acl::Operation as Op;
use crate::services::Services;

fn answer(error: Option<(ResponseError, String)>) -> UnregisterBrokerResponse {
    match error {
        // Kafka's controller answers a success with an empty message, not a null one.
        None => UnregisterBrokerResponse::default().with_error_message(Some(StrBytes::new())),
        Some((e, message)) => UnregisterBrokerResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(StrBytes::from_string(message))),
    }
}

fn not_registered(id: i32) -> Option<(ResponseError, String)> {
    Some((
        ResponseError::BrokerIdNotRegistered,
        format!("Broker ID {id} is not currently registered"),
    ))
}

/// UnregisterBroker: ALTER on the cluster.
pub struct UnregisterBroker;

impl Api for UnregisterBroker {
    type Request = UnregisterBrokerRequest;

    fn authorize(who: &Who, r: UnregisterBrokerRequest, _version: i16) -> Gate {
        if !who.may_cluster(Op::Alter) {
            return Gate::Answer(ResponseKind::UnregisterBroker(
                UnregisterBrokerResponse::default()
                    .with_error_code(CLUSTER_DENIED.code())
                    .with_error_message(None),
            ));
        }
        Gate::Run(RequestKind::UnregisterBroker(r), None)
    }

    async fn handle(
        s: &Services,
        _ctx: &Context,
        r: UnregisterBrokerRequest,
        _version: i16,
    ) -> Outcome {
        let id = r.broker_id.0;
        let Some(cluster) = &s.cluster else {
            let error = (id != s.broker.config.node_id)
                .then(|| not_registered(id))
                .flatten();
            return Outcome::respond(answer(error));
        };
        let error = match cluster.unregister_broker(BrokerId(id)).await {
            Ok(true) => None,
            Ok(false) => not_registered(id),
            Err(e) => {
                let code = e.kafka_error_code();
                let error =
                    ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError);
                Some((error, e.to_string()))
            }
        };
        Outcome::respond(answer(error))
    }
}
