QA23_EXTRA_MODELS=simple_int8; . /tmp/qa23core/patches/http_grpc.sh
