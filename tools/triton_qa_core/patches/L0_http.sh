. /tmp/qa23core/patches/http_grpc.sh
