# durafeed-service for users who have Docker: the same image that
# `make image` assembles without Docker (cmd/durafeed-image); a test
# (cmd/durafeed-image) keeps the two in step: base, user, entrypoint,
# port, working directory and environment.
#
#   docker build -t durafeed-service .
#   docker run -p 8080:8080 -e DURAFEED_AUTH_TENANT_ID=<tenant> -e DURAFEED_AUTH_AUDIENCE=<client id> durafeed-service
#
# It listens on :8080, so without those two (or DURAFEED_AUTH=none, an
# API open on purpose) the service refuses to start and says what to set.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/durafeed-service ./cmd/durafeed-service \
 && mkdir -p /out/etc/ssl/certs /out/home/nonroot /out/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ca-certificates.crt \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /out/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' > /out/etc/group \
 && chmod 1777 /out/tmp && chmod 700 /out/home/nonroot

FROM scratch
COPY --from=build /out/ /
COPY --from=build --chown=65532:65532 /out/home/nonroot /home/nonroot
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
ENV DURAFEED_LISTEN=:8080
WORKDIR /home/nonroot
USER 65532:65532
EXPOSE 8080/tcp
LABEL org.opencontainers.image.title="durafeed-service" \
      org.opencontainers.image.description="durable orchestrations for Go on Azure Cosmos DB: the reference service"
ENTRYPOINT ["/durafeed-service"]
