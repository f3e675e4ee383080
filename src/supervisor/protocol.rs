//! What the runner and `krm-fn-supervisor` say to each other: the
//! program's command lines, its exit codes and start-failure report, and
//! the resident supervisor's control-socket messages (requests and
//! reports). Both sides read these items; nothing else is shared.
//!
//! The command lines (the runner writes them, [`super::main`] reads them):
//! `krm-fn-supervisor RUNNER_PID TOKEN SANDBOX PROGRAM [ARG...]` for one
//! call ([`super::per_call`]; `TOKEN` at most [`MAX_TOKEN`] bytes, `SANDBOX`
//! the call's [`super::layers::Spec`] in hexadecimal or `-`, [`parse_hex`])
//! and `krm-fn-supervisor --resident RUNNER_PID [SPARES]` for the resident
//! pool ([`super::pool`]).

/// Exit code of a supervisor that could not set itself up.
pub(crate) const SETUP_FAILED: i32 = 125;

/// Exit code of the `krm-fn-supervisor` program when the function could not
/// be started (or the supervisor could not set itself up); its stderr is
/// then exactly [`START_FAILED`], the call's token (from the program's
/// argv), ` errno `, the decimal `errno` and a newline. The function never
/// ran, so nothing else was written there; the token, new for each call,
/// keeps a function's own stderr from passing for this report.
pub(crate) const START_FAILED_CODE: i32 = 127;

/// The stderr prefix of a [`START_FAILED_CODE`] exit.
pub(crate) const START_FAILED: &[u8] = b"krm-fn-supervisor: cannot start the function: ";

/// The resident supervisor's protocol (`krm-fn-supervisor --resident
/// RUNNER_PID`, its control socket as descriptor 0): one `SOCK_SEQPACKET`
/// message per call, the bytes of [`encode_request`] with four descriptors
/// attached (`SCM_RIGHTS`): the function's stdin, stdout and stderr, and
/// the call's status socket, on which the per-call process sends one
/// [`REPORT_BYTES`]-byte report ([`encode_report`]) and which the runner
/// closes to stop the call.
///
/// The most bytes of a request; a call whose argv, environment and working
/// directory take more is started by a per-call supervisor program instead.
pub(crate) const MAX_REQUEST: usize = 64 << 10;

/// Bytes of a report on a call's status socket.
pub(crate) const REPORT_BYTES: usize = 8;

/// Report kind: the function ended; the value is its wait status.
pub(crate) const REPORT_EXITED: u32 = 0;
/// Report kind: the function could not be started; the value is the `errno`.
pub(crate) const REPORT_START_FAILED: u32 = 1;
/// Report kind: the request could not be read; the value is 0.
pub(crate) const REPORT_BAD_REQUEST: u32 = 2;

/// A report: the kind (little-endian `u32`) and the value (`i32`).
pub(crate) fn encode_report(kind: u32, value: i32) -> [u8; REPORT_BYTES] {
    let mut out = [0u8; REPORT_BYTES];
    out[..4].copy_from_slice(&kind.to_le_bytes());
    out[4..].copy_from_slice(&value.to_le_bytes());
    out
}

/// The kind and value of a report, or `None` when `bytes` is not one.
pub(crate) fn decode_report(bytes: &[u8]) -> Option<(u32, i32)> {
    let bytes: &[u8; REPORT_BYTES] = bytes.try_into().ok()?;
    let kind = u32::from_le_bytes(bytes[..4].try_into().ok()?);
    let value = i32::from_le_bytes(bytes[4..].try_into().ok()?);
    Some((kind, value))
}

/// A request: `argc` and `envc` (little-endian `u32`), a byte saying
/// whether a working directory follows, the length of the call's sandbox
/// spec (little-endian `u32`, [`super::layers::Spec`]) and the spec, then
/// NUL-terminated strings: the working directory, `argv` (`argv[0]` is the
/// program, looked up in the environment's `PATH`) and the environment's
/// `NAME=VALUE` entries. Returns `None` when a string holds a NUL byte.
pub(crate) fn encode_request<'a>(
    cwd: Option<&[u8]>,
    sandbox: &[u8],
    argv: &[&'a [u8]],
    env: &[&'a [u8]],
) -> Option<Vec<u8>> {
    let strings = cwd.iter().chain(argv).chain(env);
    let size: usize = 13 + sandbox.len() + strings.clone().map(|s| s.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(argv.len() as u32).to_le_bytes());
    out.extend_from_slice(&(env.len() as u32).to_le_bytes());
    out.push(cwd.is_some() as u8);
    out.extend_from_slice(&(sandbox.len() as u32).to_le_bytes());
    out.extend_from_slice(sandbox);
    for s in strings {
        if s.contains(&0) {
            return None;
        }
        out.extend_from_slice(s);
        out.push(0);
    }
    Some(out)
}

/// A request read back: the working directory, `argv` and the environment,
/// each string with its NUL. Returns `None` when `bytes` is not exactly one
/// request with a non-empty `argv`.
pub(crate) fn decode_request(bytes: &[u8]) -> Option<DecodedRequest<'_>> {
    let argc = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let envc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
    let has_cwd = match *bytes.get(8)? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let sandbox_len = u32::from_le_bytes(bytes.get(9..13)?.try_into().ok()?) as usize;
    let sandbox = bytes.get(13..13usize.checked_add(sandbox_len)?)?;
    let mut rest = &bytes[13 + sandbox_len..];
    let mut next = || {
        let end = rest.iter().position(|&b| b == 0)?;
        let (s, tail) = rest.split_at(end + 1);
        rest = tail;
        Some(s)
    };
    let cwd = if has_cwd { Some(next()?) } else { None };
    if argc == 0 || argc > bytes.len() || envc > bytes.len() {
        return None;
    }
    let argv = (0..argc).map(|_| next()).collect::<Option<Vec<_>>>()?;
    let env = (0..envc).map(|_| next()).collect::<Option<Vec<_>>>()?;
    if next().is_some() || !rest.is_empty() {
        return None;
    }
    Some(DecodedRequest {
        cwd,
        sandbox,
        argv,
        env,
    })
}

/// A request read by [`decode_request`]; each string ends with its NUL.
pub(crate) struct DecodedRequest<'a> {
    /// The working directory, if any.
    pub(crate) cwd: Option<&'a [u8]>,
    /// The call's sandbox spec ([`super::layers::Spec`]; empty: none).
    pub(crate) sandbox: &'a [u8],
    /// The function's argv.
    pub(crate) argv: Vec<&'a [u8]>,
    /// The function's environment, `NAME=VALUE` entries.
    pub(crate) env: Vec<&'a [u8]>,
}

/// The most bytes of a call's token (the `TOKEN` argument).
pub(crate) const MAX_TOKEN: usize = 32;

/// The start-failure report for `token` and `errno`: [`START_FAILED`], the
/// token, ` errno `, the decimal `errno` and a newline, in a stack buffer
/// (no allocation: written between `fork` and `exec`). Returns the buffer
/// and the report's length in bytes; a token longer than [`MAX_TOKEN`] is
/// cut to it.
pub(crate) fn start_failed_report(token: &[u8], errno: i32) -> ([u8; 160], usize) {
    let mut line = [0u8; 160];
    let mut at = 0;
    for part in [
        START_FAILED,
        &token[..token.len().min(MAX_TOKEN)],
        b" errno ",
    ] {
        line[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    let mut digits = [0u8; 12];
    let mut n = errno.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for d in digits[..len].iter().rev() {
        line[at] = *d;
        at += 1;
    }
    line[at] = b'\n';
    (line, at + 1)
}

/// The bytes of `text` in hexadecimal (two digits a byte, either case),
/// empty for `-`; `None` for anything else.
pub(crate) fn parse_hex(text: &[u8]) -> Option<Vec<u8>> {
    if text == b"-" {
        return Some(Vec::new());
    }
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |d: u8| (d as char).to_digit(16).map(|v| v as u8);
    text.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// A process id in decimal (above 0 and within `pid_t`).
pub(crate) fn parse_pid(text: &[u8]) -> Option<libc::pid_t> {
    parse_count(text)?.try_into().ok().filter(|&p| p > 0)
}

/// A non-negative decimal number (digits only: no sign, no blank).
pub(crate) fn parse_count(text: &[u8]) -> Option<usize> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_reports_read_back() {
        let bytes = encode_request(
            Some(b"/tmp"),
            b"\x02r/usr\0",
            &[b"cat", b"-"],
            &[b"PATH=/bin"],
        )
        .unwrap();
        let r = decode_request(&bytes).unwrap();
        assert_eq!(r.cwd, Some(&b"/tmp\0"[..]));
        assert_eq!(r.sandbox, b"\x02r/usr\0");
        assert_eq!(r.argv, [&b"cat\0"[..], b"-\0"]);
        assert_eq!(r.env, [&b"PATH=/bin\0"[..]]);
        let bytes = encode_request(None, b"", &[b"cat"], &[]).unwrap();
        assert!(decode_request(&bytes).unwrap().cwd.is_none());
        assert!(encode_request(None, b"", &[b"c\0at"], &[]).is_none());
        assert!(decode_request(&bytes[..bytes.len() - 1]).is_none());
        assert!(decode_request(&[&bytes[..], b"x\0"].concat()).is_none());
        assert!(decode_request(&encode_request(None, b"", &[], &[]).unwrap()).is_none());
        assert!(decode_request(b"\xff\xff\xff\xff").is_none());
        assert_eq!(decode_report(&encode_report(1, -2)), Some((1, -2)));
        assert_eq!(decode_report(b"short"), None);
    }

    #[test]
    fn command_line_values_parse_or_are_refused() {
        assert_eq!(parse_hex(b"-"), Some(vec![]));
        assert_eq!(parse_hex(b"00ff7A"), Some(vec![0, 255, 0x7a]));
        assert_eq!(parse_hex(b"abc"), None);
        assert_eq!(parse_hex(b"zz"), None);
        assert_eq!(parse_hex(b""), Some(vec![]));
        assert_eq!(parse_pid(b"4242"), Some(4242));
        assert_eq!(parse_pid(b"0"), None);
        assert_eq!(parse_pid(b"-1"), None);
        assert_eq!(parse_pid(b"99999999999"), None);
        assert_eq!(parse_count(b"16"), Some(16));
        assert_eq!(parse_count(b" 16"), None);
        assert_eq!(parse_count(b"+1"), None);
        assert_eq!(parse_count(b""), None);
    }

    #[test]
    fn the_start_failure_report_is_the_prefix_token_and_errno() {
        let (line, len) = start_failed_report(b"t0k3n", 2);
        assert_eq!(
            &line[..len],
            b"krm-fn-supervisor: cannot start the function: t0k3n errno 2\n"
        );
        let (line, len) = start_failed_report(&[b'x'; 40], i32::MIN);
        let text = std::str::from_utf8(&line[..len]).unwrap();
        assert!(
            text.ends_with(&format!("{} errno 2147483648\n", "x".repeat(MAX_TOKEN))),
            "{text}"
        );
    }
}
