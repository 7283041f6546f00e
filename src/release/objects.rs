//! Reading Kubernetes objects from JSON or YAML text: single objects, `List`s, multi-document YAML,
//! and the objects inside a captured `AdmissionReview`.

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
/// Why a CLI input holds no Kubernetes objects.
pub enum InputError {
    #[error("the input is empty")]
    /// Nothing but whitespace.
    Empty,
    #[error("the input is neither JSON nor YAML Kubernetes objects: {0}")]
    /// Neither JSON nor YAML.
    Syntax(String),
    #[error("document {index} is not a Kubernetes object (it has no `kind`)")]
    /// A document without `kind`.
    NotAnObject {
        /// The document's place in the input, from 0.
        index: usize,
    },
}

/// Which object of a captured `AdmissionReview` an input object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReviewSide {
    /// `request.oldObject`: the object as stored before the request.
    Old,
    /// `request.object`: the object the request would store.
    New,
}

/// An object read from input, and where in an `AdmissionReview` it was, if it came from one.
#[derive(Debug, Clone)]
pub(crate) struct InputObject {
    /// The object.
    pub object: Value,
    /// Which side of an AdmissionReview it came from, when it did.
    pub side: Option<ReviewSide>,
}

/// Parses JSON or YAML text into Kubernetes objects, with the items of every `*List` flattened.
pub fn parse_objects(text: &[u8]) -> Result<Vec<Value>, InputError> {
    Ok(parse_inputs(text)?.into_iter().map(|input| input.object).collect())
}

/// [`parse_objects`], telling which side of a captured `AdmissionReview` each object was.
pub(crate) fn parse_inputs(text: &[u8]) -> Result<Vec<InputObject>, InputError> {
    let text = std::str::from_utf8(text).map_err(|e| InputError::Syntax(e.to_string()))?;
    if text.trim().is_empty() {
        return Err(InputError::Empty);
    }
    let documents: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(value) => vec![value],
        // Text that starts like JSON gets the JSON parser's error, which points at the fault.
        Err(error) if text.trim_start().starts_with(['{', '[']) => {
            return Err(InputError::Syntax(error.to_string()));
        }
        Err(_) => {
            serde_saphyr::from_multiple::<Value>(text).map_err(|e| InputError::Syntax(e.to_string()))?
        }
    };
    let mut objects = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        flatten(document, index, None, &mut objects)?;
    }
    Ok(objects)
}

fn flatten(
    document: Value,
    index: usize,
    side: Option<ReviewSide>,
    out: &mut Vec<InputObject>,
) -> Result<(), InputError> {
    match document {
        Value::Null => Ok(()), // an empty YAML document between `---` lines
        Value::Array(items) => items.into_iter().try_for_each(|item| flatten(item, index, side, out)),
        Value::Object(mut map) => {
            let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
            if kind == "AdmissionReview" {
                // A captured webhook request: the objects it carries are what a user wants to see.
                let mut request = map.remove("request").unwrap_or_default();
                for (key, side) in [("oldObject", ReviewSide::Old), ("object", ReviewSide::New)] {
                    if let Some(object) = request.get_mut(key).map(Value::take) {
                        flatten(object, index, Some(side), out)?;
                    }
                }
                Ok(())
            } else if kind.ends_with("List") {
                match map.remove("items") {
                    Some(items) => flatten(items, index, side, out),
                    None => Ok(()),
                }
            } else if kind.is_empty() {
                Err(InputError::NotAnObject { index })
            } else {
                out.push(InputObject { object: Value::Object(map), side });
                Ok(())
            }
        }
        _ => Err(InputError::NotAnObject { index }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_yaml_documents_are_flattened() {
        let json = br#"{"kind":"List","items":[{"kind":"Secret"},{"kind":"ConfigMap"}]}"#;
        assert_eq!(parse_objects(json).unwrap().len(), 2);
        let yaml = b"kind: Secret\nmetadata: {name: a}\n---\nkind: SecretList\nitems:\n- kind: Secret\n---\n";
        assert_eq!(parse_objects(yaml).unwrap().len(), 2);
    }

    #[test]
    fn garbage_is_a_syntax_error_and_kindless_documents_are_named() {
        assert!(matches!(parse_objects(b"{not json"), Err(InputError::Syntax(_))));
        assert!(matches!(parse_objects(b"  \n"), Err(InputError::Empty)));
        assert!(matches!(parse_objects(b"- 1\n- 2\n"), Err(InputError::NotAnObject { index: 0 })));
        assert!(matches!(parse_objects(b"\xff\xfe"), Err(InputError::Syntax(_))));
    }
}
