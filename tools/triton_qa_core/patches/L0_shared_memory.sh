mkdir -p models; cp -r /tmp/qa23core/data/pyex/simple models/
