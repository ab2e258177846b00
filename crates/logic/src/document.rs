//! What is wrong with a TOML document an operator wrote (the config, a simulator
//! scenario): the text is not the document (syntax, an unknown key, a wrong type), or one
//! key's value is refused, and why. Both report through [`DocumentError`], so a key error is
//! built and worded in one place; each document's own error enum wraps it beside what only
//! it can go wrong with (a file that cannot be read, an empty config).

/// A document that did not parse, or a key whose value is refused. `origin` names the
/// document (and, where known, the line and column).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: key `{key}`: {reason}")]
    Invalid {
        origin: String,
        key: String,
        reason: String,
    },
}

impl DocumentError {
    /// The text is not the document.
    pub fn parse(origin: impl Into<String>, message: impl Into<String>) -> DocumentError {
        DocumentError::Parse {
            origin: origin.into(),
            message: message.into(),
        }
    }

    /// `key`'s value is refused for `reason`.
    pub fn invalid(
        origin: impl Into<String>,
        key: impl Into<String>,
        reason: impl Into<String>,
    ) -> DocumentError {
        DocumentError::Invalid {
            origin: origin.into(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The key whose value is refused (None: the text did not parse).
    pub fn key(&self) -> Option<&str> {
        match self {
            DocumentError::Invalid { key, .. } => Some(key),
            DocumentError::Parse { .. } => None,
        }
    }
}
