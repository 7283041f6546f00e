# Build: docker build -t helm-guard:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin helm-guard

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/helm-guard /usr/local/bin/helm-guard
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/helm-guard"]
