//! librdkafka's errors as mqlite's: the same [`Error`] kinds a directory
//! gives for the same mistake, and [`Error::Io`] (the cluster's words
//! kept) for what has no counterpart.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::Error;

/// `e`, met while `context`, as mqlite's error.
pub(crate) fn from_kafka(e: KafkaError, context: &str) -> Error {
    match e.rdkafka_error_code() {
        Some(code) => from_code(code, "", context),
        None => match e {
            KafkaError::AdminOp(code) => from_code(code, "", context),
            KafkaError::ClientConfig(_, ref desc, ref key, ref value) => {
                Error::InvalidConfig(format!("{key} = {value:?}: {desc}"))
            }
            other => cluster_error(context, &other.to_string()),
        },
    }
}

/// The error of `code` about topic `topic` (may be empty), met while
/// `context`.
pub(crate) fn from_code(code: RDKafkaErrorCode, topic: &str, context: &str) -> Error {
    use RDKafkaErrorCode as C;
    match code {
        C::TopicAlreadyExists => Error::TopicExists(topic.to_owned()),
        C::UnknownTopicOrPartition | C::UnknownTopic => Error::UnknownTopic(topic.to_owned()),
        C::InvalidTopic => Error::InvalidTopicName {
            name: topic.to_owned(),
            reason: "the cluster refuses it",
        },
        C::InvalidPartitions
        | C::InvalidReplicationFactor
        | C::InvalidConfig
        | C::PolicyViolation => Error::InvalidConfig(format!("{context}: {code}")),
        C::RequestTimedOut | C::MessageTimedOut | C::OperationTimedOut => Error::Timeout(0),
        C::ProducerFenced | C::Fenced | C::InvalidProducerEpoch => Error::ProducerFenced {
            producer_id: -1,
            epoch: -1,
            current_epoch: -1,
        },
        C::IllegalGeneration | C::UnknownMemberId | C::RebalanceInProgress => {
            Error::CommitFailed(format!("{context}: {code}"))
        }
        C::InvalidArgument => Error::InvalidArgument(format!("{context}: {code}")),
        _ => cluster_error(context, &code.to_string()),
    }
}

/// An error of the cluster or of the way to it.
pub(crate) fn cluster_error(context: &str, what: &str) -> Error {
    Error::Io {
        context: context.to_owned(),
        source: std::io::Error::other(format!("Kafka: {what}")),
    }
}
