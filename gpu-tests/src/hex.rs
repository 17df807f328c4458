//! Binary values (IPC handles, NCCL unique ids) as hex text, to pass them between processes in
//! a message line or a file.

/// Two lowercase hex digits per byte.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `len` bytes written by [`encode`] (surrounding whitespace is ignored).
pub fn decode(text: &str, len: usize) -> Result<Vec<u8>, String> {
    let text = text.trim();
    if text.len() != 2 * len || !text.is_ascii() {
        return Err(format!("expected {} hex digits, got {text:?}", 2 * len));
    }
    (0..len).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|e| format!("{text:?}: {e}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&bytes), 256).unwrap(), bytes);
        assert_eq!(encode(&[0x0a, 0xff]), "0aff");
        assert_eq!(decode(" 0aff\n", 2).unwrap(), [0x0a, 0xff]);
        assert!(decode("0aff", 3).is_err());
        assert!(decode("0agf", 2).is_err());
        assert!(decode("é0", 1).is_err());
    }
}
