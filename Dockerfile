# With a registry: docker build -t helm-guard:0.1.0 .   (offline, with podman: image/build.sh)
# The same binary as image/build.sh, the same way (cargo auditable build --release --locked, so
# that scanners read its dependencies from the image; laid out by image/rootfs.sh); the final
# stage is image/Containerfile's. The SBOM file beside the image is image/build.sh's.
FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN cargo install --locked cargo-auditable@0.7.7
COPY . .
RUN cargo auditable build --release --locked --bin helm-guard \
 && mkdir -p /image && image/rootfs.sh target/release/helm-guard /image/rootfs

FROM scratch
ARG VERSION=unknown
ARG REVISION=unknown
# OCI annotations: scanners and registries read where the image comes from.
LABEL org.opencontainers.image.title="helm-guard" \
      org.opencontainers.image.description="Admission webhook that keeps Helm release records from being broken" \
      org.opencontainers.image.source="https://github.com/helm-guard/helm-guard" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"
COPY --from=build /image/rootfs/ /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/helm-guard"]
