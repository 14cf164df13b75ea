# the C++ identity backend -> the Python stand-in (execute_delay_ms kept)
sed -i "s#echo 'backend: \"identity\"' >> config.pbtxt#echo 'backend: \"python\"' >> config.pbtxt \&\& cp /tmp/qa23core/models/identity.py 1/model.py#" test.sh
