# syntax=docker/dockerfile:1
#
# sysport container image.
#
#   docker build -t ghcr.io/example/sysport:0.1.0 .
#   docker run --rm -p 8081:8081 ghcr.io/example/sysport:0.1.0 --upstream vllm=http://HOST:8000/metrics
#
# The image carries the example config at /etc/sysport/config.yaml; sysport reads it only when
# told to (SYSPORT_CONFIG=/etc/sysport/config.yaml or --config /etc/sysport/config.yaml).

# ---- builder -------------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /build

# Dependencies first: build them against stub targets so that a source change reuses this
# layer instead of recompiling every crate. sysport and the workspace's exposition crate
# declare bench targets, so they need stubs too; the benchmark inputs crate is a workspace
# member (not built here: only the benchmarks use it).
COPY Cargo.toml Cargo.lock ./
COPY crates/expfmt/Cargo.toml crates/expfmt/
COPY crates/bench-inputs/Cargo.toml crates/bench-inputs/
RUN mkdir -p src benches crates/expfmt/src crates/expfmt/benches crates/bench-inputs/src \
    && echo 'fn main() {}' > src/main.rs \
    && echo 'fn main() {}' > benches/relabel.rs \
    && echo '' > src/lib.rs \
    && echo '' > crates/expfmt/src/lib.rs \
    && echo '' > crates/bench-inputs/src/lib.rs \
    && echo 'fn main() {}' > crates/expfmt/benches/expfmt.rs \
    && cargo build --release --locked \
    && rm -rf src benches crates \
        target/release/sysport target/release/sysport.d \
        target/release/deps/sysport-* target/release/deps/libsysport-* \
        target/release/deps/sysport_expfmt-* target/release/deps/libsysport_expfmt-* \
        target/release/.fingerprint/sysport-*

# The real sources (see .dockerignore for what stays out).
COPY . .
RUN cargo build --release --locked

# ---- runtime -------------------------------------------------------------------------------
# distroless/cc: glibc and libgcc only, no shell, no package manager; `nonroot` is uid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="sysport" \
      org.opencontainers.image.description="System-port sidecar for LLM inference workers: /metrics, /health, /live" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=builder /build/target/release/sysport /usr/local/bin/sysport
COPY config/sysport.example.yaml /etc/sysport/config.yaml

# glibc's per-thread arenas each keep their high-water mark; a single one bounds peak RSS with large
# upstream bodies (bench/RESULTS.md); one arena is enough for a sidecar.
ENV MALLOC_ARENA_MAX=1
USER 65532:65532
# The default system port (DYN_SYSTEM_PORT). Not set as ENV here: the environment overrides the
# config file, and the file's listen.port should win when one is given.
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/sysport"]
