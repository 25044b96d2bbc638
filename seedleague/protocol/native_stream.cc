// A worker's lockstep gRPC stream in C++, for Python workers (seedleague/protocol/native_stream.py loads it).
//
// Python's grpcio client hands every message between three threads (the caller, the request iterator's
// consumer, the channel's poller), and each hand-over is a wake-up and a GIL transfer: on a busy machine
// that costs a worker more CPU per round trip than stepping 64 CartPole envs. This library does one
// exchange (write a serialized StepBatch, read the serialized answer) in the calling thread with the GIL
// released: ctypes releases it for each call. The wait comes back every few milliseconds unanswered, so the
// interpreter runs its signal handlers (a worker's SIGTERM) while the host takes its time.
//
// It moves bytes only. The messages are built and checked in Python (protobuf's upb), the handshake stays
// on grpcio, and the stream is the same one (any method path: v1's and v2's Stream alike), so the host
// cannot tell the two clients apart.
//
// A C ABI (no Python headers needed to build, nothing to match to the interpreter):
//   sls_open      open the stream (channel, TLS roots, call metadata, size limits); NULL with an error text
//   sls_send      write one request and ask for its answer; 2 (waiting), or 1 when the stream ended
//   sls_wait      wait up to a timeout for that answer: 0 answered, 2 still waiting, 1 ended (then sls_status)
//   sls_status    the ended stream's gRPC status code and details
//   sls_cancel    end the stream from any thread: a waiting sls_wait returns 1 (CANCELLED)
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
enum Wait : int { kAnswered = 0, kEnded = 1, kWaiting = 2 };

struct Stream {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  grpc::ClientContext context;
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  bool write_pending = false;
  bool read_pending = false;
  bool exchange_ok = true;  // every op of the current exchange succeeded so far
  grpc::ByteBuffer answer;
  std::string answer_bytes;  // the last answer, valid until the next exchange
  grpc::Status status;
  bool ended = false;
};

void set_error(char* error, size_t error_len, const std::string& text) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", text.c_str());
}

// Take one completion off the queue (waiting until `deadline`); false on timeout or a shut queue.
bool next_completion(Stream* s, gpr_timespec deadline) {
  void* tag = nullptr;
  bool ok = false;
  if (s->queue.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) return false;
  switch (static_cast<Tag>(reinterpret_cast<intptr_t>(tag))) {
    case kWrite: s->write_pending = false; break;
    case kRead: s->read_pending = false; break;
    default: break;
  }
  s->exchange_ok = s->exchange_ok && ok;
  return true;
}

// The stream is over: cancel it unless it ended by itself, let its pending ops complete, fetch its status once.
void finish(Stream* s, bool cancel) {
  if (s->ended) return;
  s->ended = true;
  if (cancel) s->context.TryCancel();
  gpr_timespec forever = gpr_inf_future(GPR_CLOCK_REALTIME);
  while ((s->write_pending || s->read_pending) && next_completion(s, forever)) {
  }
  s->call->Finish(&s->status, reinterpret_cast<void*>(kFinish));
  void* tag = nullptr;
  bool ok = false;
  while (s->queue.Next(&tag, &ok)) {
    if (static_cast<Tag>(reinterpret_cast<intptr_t>(tag)) == kFinish) return;
  }
  s->status = grpc::Status(grpc::StatusCode::CANCELLED, "stream closed");
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
  void* tag = nullptr;
  bool ok = false;
  if (!stream->queue.Next(&tag, &ok) || !ok) {
    finish(stream.get(), true);
    set_error(error, error_len, "could not start the stream: " + stream->status.error_message());
    stream->queue.Shutdown();
    while (stream->queue.Next(&tag, &ok)) {
    }
    return nullptr;
  }
  return stream.release();
}

int sls_send(void* handle, const char* request, size_t request_len) {
  auto* s = static_cast<Stream*>(handle);
  if (s->ended) return kEnded;
  if (s->write_pending || s->read_pending) {  // the last exchange was abandoned mid-way: its answer is lost
    finish(s, true);
    s->status = grpc::Status(grpc::StatusCode::CANCELLED, "a step was sent before the last one was answered");
    return kEnded;
  }
  grpc::Slice slice(request, request_len);
  grpc::ByteBuffer buffer(&slice, 1);
  s->exchange_ok = true;
  s->write_pending = s->read_pending = true;
  s->call->Write(buffer, reinterpret_cast<void*>(kWrite));
  s->call->Read(&s->answer, reinterpret_cast<void*>(kRead));
  return kWaiting;
}

int sls_wait(void* handle, int timeout_ms, const char** answer, size_t* answer_len) {
  auto* s = static_cast<Stream*>(handle);
  if (s->ended) return kEnded;
  gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
  while (s->write_pending || s->read_pending) {
    if (!next_completion(s, deadline)) return kWaiting;
  }
  if (!s->exchange_ok) {
    finish(s, false);
    return kEnded;
  }
  std::vector<grpc::Slice> slices;
  if (!s->answer.Dump(&slices).ok()) {
    finish(s, true);
    return kEnded;
  }
  s->answer_bytes.clear();
  for (const auto& piece : slices) s->answer_bytes.append(reinterpret_cast<const char*>(piece.begin()), piece.size());
  *answer = s->answer_bytes.data();
  *answer_len = s->answer_bytes.size();
  return kAnswered;
}

int sls_status(void* handle, char* details, size_t details_len) {
  auto* s = static_cast<Stream*>(handle);
  set_error(details, details_len, s->status.error_message());
  return static_cast<int>(s->status.error_code());
}

void sls_cancel(void* handle) { static_cast<Stream*>(handle)->context.TryCancel(); }

void sls_close(void* handle) {
  auto* s = static_cast<Stream*>(handle);
  finish(s, true);
  s->queue.Shutdown();
  void* tag;
  bool ok;
  while (s->queue.Next(&tag, &ok)) {
  }
  delete s;
}

}  // extern "C"
