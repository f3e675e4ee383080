//! Copies of the payload the server holds per call: a 1 MiB and a 5 MiB
//! ResourceList through `krm-fn-runner serve` (the exec runtime, the
//! catalog's `set-namespace`), one call at a time. Before each call the
//! server's peak RSS is reset to its current RSS (`/proc/PID/clear_refs`,
//! `5`); after it, `copies = (peak RSS - RSS before) / payload bytes`, where
//! the payload is the larger of the input and the output. Everything the
//! server allocates for the call counts (decode and encode buffers, the
//! function's output, the input check), so this is an upper bound on the
//! payload's copies. Target: at most 2. Prints the median of 5 calls per
//! size. The server runs with mimalloc's purge delay at 0 and glibc's mmap
//! threshold fixed (see `run`), so that freed buffers leave RSS.
//!
//! Needs the catalog functions (`scripts/install-catalog-functions.sh`) and
//! Linux's `/proc`. Run: `cargo bench --bench payload_copies`.

use krm_fn_testbed::common;

use krm_fn_runner::adapters::grpc::pb::EvaluateFunctionRequest;

const MIB: usize = 1 << 20;
const CALLS: usize = 5;

/// A ResourceList of ConfigMaps, each with a 1 KiB value, of about `bytes`.
fn resource_list(bytes: usize) -> String {
    let mut out = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    let value = "x".repeat(1024);
    let mut i = 0;
    while out.len() < bytes {
        out.push_str(&format!(
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cm-{i}\n  data:\n    k: {value}\n"
        ));
        i += 1;
    }
    out.push_str("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: bench\n");
    out
}

/// `field` (`VmRSS`, `VmHWM`) of process `pid`, bytes.
fn status_bytes(pid: u32, field: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    let kib: usize = line[field.len() + 1..]
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .expect("a number of kB");
    kib * 1024
}

async fn run() {
    let catalog = common::catalog_dir();
    let image = common::catalog_image("set-namespace");
    let config = format!("--config={}", catalog.join("config.yaml").display());
    let functions = format!("--functions={}", catalog.join("bin").display());
    // Freed memory leaves RSS at once, so RSS follows the large buffers
    // instead of the heap's high-water mark: mimalloc (the server's
    // allocator) purges freed pages with no delay instead of after 10 ms;
    // glibc, for a server built without it, serves every allocation of 128
    // KiB or more with its own mmap and returns it at free (a fixed
    // threshold also turns off glibc's raising of it after a free).
    let server = common::Runner::start_with_env(
        &[
            &config,
            &functions,
            "--disable-runtimes=pod",
            "--log-level=0",
            "--max-request-body-size=16777216",
        ],
        &[
            ("MALLOC_MMAP_THRESHOLD_", "131072"),
            ("MIMALLOC_PURGE_DELAY", "0"),
        ],
    );
    let pid = server.pid();
    let mut client = server.client().await;
    for size in [MIB, 5 * MIB] {
        let input = bytes::Bytes::from(resource_list(size));
        let mut copies = Vec::with_capacity(CALLS);
        let mut output_len = 0;
        // One call first: the runtime's buffers and the allocator's arenas
        // reach their steady size.
        for round in 0..=CALLS {
            let before = status_bytes(pid, "VmRSS");
            std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset peak RSS");
            let response = client
                .evaluate_function(EvaluateFunctionRequest {
                    tag: String::new(),
                    resource_list: input.clone(),
                    image: image.clone(),
                })
                .await
                .expect("evaluate")
                .into_inner();
            let peak = status_bytes(pid, "VmHWM");
            output_len = response.resource_list.len();
            assert!(output_len > input.len() / 2, "set-namespace kept the items");
            if round > 0 {
                let payload = input.len().max(output_len);
                copies.push(peak.saturating_sub(before) as f64 / payload as f64);
            }
        }
        copies.sort_by(f64::total_cmp);
        println!(
            "payload copies at {:.1} MiB in, {:.1} MiB out: {:.2} (median of {CALLS}; min {:.2}, max {:.2}; target <= 2)",
            input.len() as f64 / MIB as f64,
            output_len as f64 / MIB as f64,
            copies[CALLS / 2],
            copies[0],
            copies[CALLS - 1],
        );
    }
}

fn main() {
    common::bench_main(run);
}
