#!/usr/bin/env node
// A generic gRPC client on @grpc/grpc-js: an HTTP/2 + gRPC implementation independent of grpcio,
// used by tests/integration/test_grpc_interop_node.py to drive tritium's gRPC server.
//
// It knows no protobuf: the Python test serialises every request with tritonclient's generated
// classes and decodes every response, so the messages on the wire are the official ones and this
// script only moves bytes (identity serialisers, Buffer in, Buffer out).
//
// Input: one JSON object on stdin
//   { "target": "127.0.0.1:8001",
//     "channel_options": { "grpc.default_compression_algorithm": 2, ... },
//     "tls": null | { "root_cert": path, "client_key": path, "client_cert": path },
//     "serial": false,                 // true: calls one after another, else all at once
//     "timeout_ms": 50000,             // the whole run; past it the script exits 3
//     "calls": [ {
//        "method": "/inference.GRPCInferenceService/ModelInfer",
//        "kind": "unary" | "bidi",
//        "requests": [ base64, ... ],   // unary: exactly one
//        "gates": [ int, ... ],         // bidi: write request i once gates[i] responses arrived
//        "half_close": true,            // bidi: end the request side after the last request
//        "deadline_ms": int, "metadata": { key: value },
//        "cancel_after_responses": int, "cancel_after_ms": int } ] }
// All calls of one run share one channel (one HTTP/2 connection), so concurrent calls are
// concurrent streams on it.
//
// Output: JSON lines on stdout
//   {"call": i, "response": base64, "written": n}     // n: requests written when it arrived
//   {"call": i, "headers": {...}}                      // response headers (initial metadata)
//   {"call": i, "status": code, "details": str, "trailers": {...}, "responses": m, "written": n}
//   {"wire": {"path": str, "grpc_encoding": str|null, "flags": [int, ...],
//             "response_encoding": str|null, "accept_encoding": str|null}}
//      // one per HTTP/2 stream, as seen on the wire: the grpc-encoding request header, the
//      // compressed-flag byte of each length-prefixed message written, and the grpc-encoding
//      // and grpc-accept-encoding of the response headers
//   {"done": true}
'use strict';

const http2 = require('http2');
const fs = require('fs');

let grpc;
try {
  grpc = require('@grpc/grpc-js');
} catch (err) {
  process.stderr.write('@grpc/grpc-js is not installed: run `make interop-deps`\n');
  process.exit(2);
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// Record what grpc-js puts on the wire, per HTTP/2 stream, without changing it: grpc-js looks
// up http2.connect at call time, so wrapping it here sees every session it opens.
const realConnect = http2.connect;
http2.connect = function connect(...args) {
  const session = realConnect.apply(this, args);
  const realRequest = session.request;
  session.request = function request(headers, ...rest) {
    const stream = realRequest.call(this, headers, ...rest);
    const wire = {
      path: headers[':path'],
      grpc_encoding: headers['grpc-encoding'] || null,
      flags: [],
      response_encoding: null,
      accept_encoding: null,
    };
    stream.once('response', (h) => {
      wire.response_encoding = h['grpc-encoding'] || null;
      wire.accept_encoding = h['grpc-accept-encoding'] || null;
    });
    const realWrite = stream.write;
    stream.write = function write(chunk, ...more) {
      if (Buffer.isBuffer(chunk) && chunk.length >= 5) wire.flags.push(chunk[0]);
      return realWrite.call(this, chunk, ...more);
    };
    stream.once('close', () => emit({ wire }));
    return stream;
  };
  return session;
};

function metadataToObject(metadata) {
  const out = {};
  if (!metadata) return out;
  for (const [key, value] of Object.entries(metadata.getMap())) {
    out[key] = Buffer.isBuffer(value) ? value.toString('base64') : value;
  }
  return out;
}

function makeMetadata(spec) {
  const metadata = new grpc.Metadata();
  for (const [key, value] of Object.entries(spec || {})) {
    for (const one of Array.isArray(value) ? value : [value]) metadata.add(key, String(one));
  }
  return metadata;
}

function callOptions(spec) {
  const options = {};
  if (spec.deadline_ms !== undefined) options.deadline = new Date(Date.now() + spec.deadline_ms);
  return options;
}

function credentials(tls) {
  if (!tls) return grpc.credentials.createInsecure();
  const read = (path) => (path ? fs.readFileSync(path) : null);
  return grpc.credentials.createSsl(read(tls.root_cert), read(tls.client_key), read(tls.client_cert));
}

const identity = (buffer) => buffer;

function finishStatus(index, status, responses, written) {
  emit({
    call: index,
    status: status.code,
    details: status.details,
    trailers: metadataToObject(status.metadata),
    responses,
    written,
  });
}

function unary(client, index, spec) {
  return new Promise((resolve) => {
    let status = null;
    let answered = false;
    let responses = 0;
    const settle = () => {
      if (status && answered) {
        finishStatus(index, status, responses, 1);
        resolve();
      }
    };
    const request = Buffer.from(spec.requests[0], 'base64');
    const call = client.makeUnaryRequest(
      spec.method, identity, identity, request, makeMetadata(spec.metadata), callOptions(spec),
      (err, value) => {
        if (!err && value) {
          responses += 1;
          emit({ call: index, response: value.toString('base64'), written: 1 });
        }
        answered = true;
        settle();
      },
    );
    call.on('metadata', (md) => emit({ call: index, headers: metadataToObject(md) }));
    call.on('status', (s) => {
      status = s;
      settle();
    });
    if (spec.cancel_after_ms !== undefined) setTimeout(() => call.cancel(), spec.cancel_after_ms);
  });
}

function bidi(client, index, spec) {
  return new Promise((resolve) => {
    const requests = spec.requests.map((r) => Buffer.from(r, 'base64'));
    const gates = spec.gates || requests.map(() => 0);
    let written = 0;
    let responses = 0;
    let status = null;
    let drained = false;
    const call = client.makeBidiStreamRequest(
      spec.method, identity, identity, makeMetadata(spec.metadata), callOptions(spec),
    );
    const settle = () => {
      if (status && drained) {
        finishStatus(index, status, responses, written);
        resolve();
      }
    };
    const pump = () => {
      while (written < requests.length && gates[written] <= responses) {
        call.write(requests[written]);
        written += 1;
        if (written === requests.length && spec.half_close !== false) call.end();
      }
    };
    call.on('metadata', (md) => emit({ call: index, headers: metadataToObject(md) }));
    call.on('data', (buffer) => {
      responses += 1;
      emit({ call: index, response: buffer.toString('base64'), written });
      if (spec.cancel_after_responses === responses) call.cancel();
      pump();
    });
    call.on('error', () => {
      drained = true; // the code and details come with 'status'
      settle();
    });
    call.on('end', () => {
      drained = true;
      settle();
    });
    call.on('status', (s) => {
      status = s;
      settle();
    });
    if (spec.cancel_after_ms !== undefined) setTimeout(() => call.cancel(), spec.cancel_after_ms);
    pump();
  });
}

async function main() {
  const job = JSON.parse(fs.readFileSync(0, 'utf8'));
  const timer = setTimeout(() => {
    process.stderr.write(`client.js: the run took longer than ${job.timeout_ms || 50000} ms\n`);
    process.exit(3);
  }, job.timeout_ms || 50000);
  const client = new grpc.Client(job.target, credentials(job.tls), job.channel_options || {});
  const run = (spec, index) => (spec.kind === 'bidi' ? bidi : unary)(client, index, spec);
  if (job.serial) {
    for (const [index, spec] of job.calls.entries()) await run(spec, index);
  } else {
    await Promise.all(job.calls.map(run));
  }
  client.close();
  clearTimeout(timer);
  // 'close' of the last HTTP/2 stream may come a tick after its status.
  setImmediate(() => emit({ done: true }));
}

main().catch((err) => {
  process.stderr.write(`client.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
