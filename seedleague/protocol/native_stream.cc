// A worker's lockstep gRPC stream in C++, for Python workers (seedleague/protocol/native_stream.py loads it).
//
// Python's grpcio client hands every message between three threads (the caller, the request iterator's
// consumer, the channel's poller), and each hand-over is a wake-up and a GIL transfer: on a busy machine
// that costs a worker more CPU per round trip than stepping 64 CartPole envs. This library does one
// exchange (write a serialized StepBatch, read the serialized answer) in the calling thread with the GIL
// released: ctypes releases it for the whole call.
//
// It moves bytes only. The messages are built and checked in Python (protobuf's upb), the handshake stays
// on grpcio, and the stream is the same one (any method path: v1's and v2's Stream alike), so the host
// cannot tell the two clients apart.
//
// A C ABI (no Python headers needed to build, nothing to match to the interpreter):
//   sls_open      open the stream (channel, TLS roots, call metadata, size limits); NULL with an error text
//   sls_exchange  write one request, read one answer; 0, or 1 when the stream ended (then sls_status)
//   sls_status    the ended stream's gRPC status code and details
//   sls_cancel    end the stream from any thread: a blocked sls_exchange returns 1 (CANCELLED)
//   sls_close     free a stream no thread is using

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int kKeepaliveTimeMs = 20000;  // as seedleague/protocol/channel.py's KEEPALIVE_TIME_MS

enum Tag : intptr_t { kStart = 1, kWrite = 2, kRead = 3, kFinish = 4 };

struct Stream {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  grpc::ClientContext context;
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  grpc::ByteBuffer answer;
  std::string answer_bytes;  // the last answer, valid until the next exchange
  grpc::Status status;
  bool ended = false;
};

void set_error(char* error, size_t error_len, const std::string& text) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", text.c_str());
}

// Wait for the completion of `wanted`, recording every tag's success on the way; false if the queue is shut.
bool await_tags(Stream* s, std::vector<Tag> wanted, bool* all_ok) {
  *all_ok = true;
  while (!wanted.empty()) {
    void* tag = nullptr;
    bool ok = false;
    if (!s->queue.Next(&tag, &ok)) return false;
    *all_ok = *all_ok && ok;
    for (auto it = wanted.begin(); it != wanted.end(); ++it) {
      if (static_cast<Tag>(reinterpret_cast<intptr_t>(tag)) == *it) {
        wanted.erase(it);
        break;
      }
    }
  }
  return true;
}

// The stream is over: fetch its status once.
void finish(Stream* s) {
  if (s->ended) return;
  s->ended = true;
  s->call->Finish(&s->status, reinterpret_cast<void*>(kFinish));
  bool ok = false;
  if (!await_tags(s, {kFinish}, &ok)) s->status = grpc::Status(grpc::StatusCode::CANCELLED, "stream closed");
}

}  // namespace

extern "C" {

void* sls_open(const char* target, const char* root_pem, const char* method, const char** metadata_keys,
               const char** metadata_values, int metadata_count, int max_message_bytes, char* error,
               size_t error_len) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (root_pem != nullptr && root_pem[0] != '\0') {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = root_pem;
    credentials = grpc::SslCredentials(options);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  auto stream = std::make_unique<Stream>();
  stream->channel = grpc::CreateCustomChannel(target, credentials, args);
  stream->stub = std::make_unique<grpc::GenericStub>(stream->channel);
  for (int i = 0; i < metadata_count; ++i) stream->context.AddMetadata(metadata_keys[i], metadata_values[i]);
  stream->call = stream->stub->PrepareCall(&stream->context, method, &stream->queue);
  stream->call->StartCall(reinterpret_cast<void*>(kStart));
  bool ok = false;
  if (!await_tags(stream.get(), {kStart}, &ok) || !ok) {
    finish(stream.get());
    set_error(error, error_len, "could not start the stream: " + stream->status.error_message());
    stream->queue.Shutdown();
    void* tag;
    while (stream->queue.Next(&tag, &ok)) {
    }
    return nullptr;
  }
  return stream.release();
}

int sls_exchange(void* handle, const char* request, size_t request_len, const char** answer, size_t* answer_len) {
  auto* s = static_cast<Stream*>(handle);
  if (s->ended) return 1;
  grpc::Slice slice(request, request_len);
  grpc::ByteBuffer buffer(&slice, 1);
  s->call->Write(buffer, reinterpret_cast<void*>(kWrite));
  s->call->Read(&s->answer, reinterpret_cast<void*>(kRead));
  bool ok = false;
  if (!await_tags(s, {kWrite, kRead}, &ok) || !ok) {
    finish(s);
    return 1;
  }
  std::vector<grpc::Slice> slices;
  if (!s->answer.Dump(&slices).ok()) {
    s->context.TryCancel();
    finish(s);
    return 1;
  }
  s->answer_bytes.clear();
  for (const auto& piece : slices) s->answer_bytes.append(reinterpret_cast<const char*>(piece.begin()), piece.size());
  *answer = s->answer_bytes.data();
  *answer_len = s->answer_bytes.size();
  return 0;
}

int sls_status(void* handle, char* details, size_t details_len) {
  auto* s = static_cast<Stream*>(handle);
  set_error(details, details_len, s->status.error_message());
  return static_cast<int>(s->status.error_code());
}

void sls_cancel(void* handle) { static_cast<Stream*>(handle)->context.TryCancel(); }

void sls_close(void* handle) {
  auto* s = static_cast<Stream*>(handle);
  if (!s->ended) {
    s->context.TryCancel();
    finish(s);
  }
  s->queue.Shutdown();
  void* tag;
  bool ok;
  while (s->queue.Next(&tag, &ok)) {
  }
  delete s;
}

}  // extern "C"
