// seedleague env worker in C++: Connect Four, num_envs games stepped together,
// two seats, turn-based, legal masks, same-step autoreset.
//
//   build/cpp/connect_four_worker --address 127.0.0.1:50051 [--num-envs 16]
//       [--seed 0] [--max-steps 0] [--protocol 2]
//       [--tls-ca host.pem [--tls-server-name NAME] [--tls-cert client.pem --tls-key client.key]]
//
// Protocol 2 (proto/seedleague/v2/env.proto, the default): the board as the named
// tensor "board", one discrete head "column" with a legal mask, seats as two teams
// of one, episode stats "win" and "moves". A host without the v2 service
// (UNIMPLEMENTED) gets protocol 1 instead, as does --protocol 1
// (proto/seedleague/v1/env.proto: the same game without names and stats).
//
// SEEDLEAGUE_TOKEN set => every RPC carries "authorization: Bearer <token>".
// --tls-ca => TLS, trusting that CA (docs/protocol.md section 11); without it, plaintext.
// Exit status: 0 stopped (SIGTERM/SIGINT or --max-steps reached), 2 refused by
// the host (or bad flags).
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "connect_four.h"
#include "seedleague/v1/env.grpc.pb.h"
#include "seedleague/v1/env.pb.h"
#include "seedleague/v2/env.grpc.pb.h"
#include "seedleague/v2/env.pb.h"

namespace {

namespace pb1 = seedleague::v1;
namespace pb2 = seedleague::v2;

constexpr int kSeats = 2;
constexpr char kEnvName[] = "ConnectFour-cpp";

struct Flags {
  std::string address;
  int num_envs = 16;
  uint64_t seed = 0;
  int64_t max_steps = 0;
  int protocol = 2;  // 1 or 2: the protocol version to handshake with
  double backoff_initial_s = 0.1;
  double backoff_max_s = 5.0;
  double connect_timeout_s = 10.0;
  std::string tls_ca;           // PEM CA the host's certificate must chain to; "" = plaintext
  std::string tls_server_name;  // name to check the host's certificate against ("" = the address's host)
  std::string tls_cert;         // PEM client certificate, for hosts or proxies that demand one
  std::string tls_key;          // its unencrypted PEM private key
};

// The PEM files' contents, read once at start (a missing file is a flag error, not a retry).
struct TlsFiles {
  std::string ca, cert, key;
};

void Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --address HOST:PORT [--num-envs N (16)] [--seed S (0)] "
               "[--max-steps N (0 = unlimited)] [--protocol 1|2 (2)] [--backoff-initial S] [--backoff-max S] "
               "[--connect-timeout S] [--tls-ca PEM] [--tls-server-name NAME] [--tls-cert PEM --tls-key PEM]\n"
               "  --protocol 2            named tensors, a legal-masked head, teams, episode stats (default;\n"
               "                          protocol 1 when the host has no v2 service)\n"
               "  --protocol 1            the version-1 protocol only\n"
               "  --tls-ca PEM            trust this CA and connect with TLS (default: plaintext)\n"
               "  --tls-server-name NAME  name to check the host's certificate against (default: the address's host)\n"
               "  --tls-cert/--tls-key    client certificate and key, for a host or proxy that requires one\n",
               argv0);
}

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    auto eq = arg.find('=');
    bool has_inline = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_inline) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto next = [&](std::string* out) {
      if (has_inline) {
        *out = value;
        return true;
      }
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    try {
      if (arg == "-h" || arg == "--help") {
        Usage(argv[0]);
        std::exit(0);
      } else if (arg == "--address") {
        if (!next(&flags->address)) return false;
      } else if (arg == "--num-envs") {
        if (!next(&v)) return false;
        flags->num_envs = std::stoi(v);
      } else if (arg == "--seed") {
        if (!next(&v)) return false;
        flags->seed = std::stoull(v);
      } else if (arg == "--max-steps") {
        if (!next(&v)) return false;
        flags->max_steps = std::stoll(v);
      } else if (arg == "--protocol") {
        if (!next(&v)) return false;
        flags->protocol = std::stoi(v);
      } else if (arg == "--backoff-initial") {
        if (!next(&v)) return false;
        flags->backoff_initial_s = std::stod(v);
      } else if (arg == "--backoff-max") {
        if (!next(&v)) return false;
        flags->backoff_max_s = std::stod(v);
      } else if (arg == "--connect-timeout") {
        if (!next(&v)) return false;
        flags->connect_timeout_s = std::stod(v);
      } else if (arg == "--tls-ca") {
        if (!next(&flags->tls_ca)) return false;
      } else if (arg == "--tls-server-name") {
        if (!next(&flags->tls_server_name)) return false;
      } else if (arg == "--tls-cert") {
        if (!next(&flags->tls_cert)) return false;
      } else if (arg == "--tls-key") {
        if (!next(&flags->tls_key)) return false;
      } else {
        std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
        return false;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bad value for %s\n", arg.c_str());
      return false;
    }
  }
  if (flags->address.empty()) {
    std::fprintf(stderr, "--address is required\n");
    return false;
  }
  if (flags->num_envs < 1 || flags->max_steps < 0 || flags->backoff_initial_s <= 0 ||
      flags->backoff_max_s < flags->backoff_initial_s || flags->connect_timeout_s <= 0) {
    std::fprintf(stderr, "bad flag values: need --num-envs >= 1, --max-steps >= 0, backoffs > 0\n");
    return false;
  }
  if (flags->protocol != 1 && flags->protocol != 2) {
    std::fprintf(stderr, "--protocol must be 1 or 2, got %d\n", flags->protocol);
    return false;
  }
  if (flags->tls_cert.empty() != flags->tls_key.empty()) {
    std::fprintf(stderr, "give both --tls-cert and --tls-key (a client certificate and its key), or neither\n");
    return false;
  }
  if (flags->tls_ca.empty() && (!flags->tls_server_name.empty() || !flags->tls_cert.empty())) {
    std::fprintf(stderr, "--tls-server-name, --tls-cert and --tls-key need --tls-ca (the CA the host's "
                         "certificate chains to)\n");
    return false;
  }
  return true;
}

// Reads the PEM file `path` given as `flag` into `out`; false (with a message) if it cannot be read
// or holds no "-----BEGIN ...<marker>" block.
bool ReadPem(const char* flag, const std::string& path, const char* marker, std::string* out) {
  if (path.empty()) return true;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    std::fprintf(stderr, "%s '%s' cannot be read (%s): give the path of a PEM file\n", flag, path.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::ostringstream data;
  data << file.rdbuf();
  *out = data.str();
  if (out->find(marker) == std::string::npos) {
    std::fprintf(stderr, "%s '%s' holds no '-----BEGIN ...%s' PEM block: give a PEM file\n", flag, path.c_str(),
                 marker);
    return false;
  }
  return true;
}

bool ReadTlsFiles(const Flags& flags, TlsFiles* files) {
  return ReadPem("--tls-ca", flags.tls_ca, "CERTIFICATE-----", &files->ca) &&
         ReadPem("--tls-cert", flags.tls_cert, "CERTIFICATE-----", &files->cert) &&
         ReadPem("--tls-key", flags.tls_key, "PRIVATE KEY-----", &files->key);
}

// ---------------------------------------------------------------- stopping --
// SIGTERM/SIGINT are blocked in every thread and taken by one sigwait thread,
// which sets `g_stop`, wakes any backoff sleep and cancels the live RPC.
std::atomic<bool> g_stop{false};
std::mutex g_mu;
std::condition_variable g_cv;
grpc::ClientContext* g_live_call = nullptr;  // guarded by g_mu

void SetLiveCall(grpc::ClientContext* context) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_live_call = context;
  if (context != nullptr && g_stop.load()) context->TryCancel();
}

void SignalThread(sigset_t set) {
  int signum = 0;
  sigwait(&set, &signum);
  std::fprintf(stderr, "connect_four_worker: got signal %d, stopping\n", signum);
  std::lock_guard<std::mutex> lock(g_mu);
  g_stop.store(true);
  if (g_live_call != nullptr) g_live_call->TryCancel();
  g_cv.notify_all();
}

// Sleeps `seconds` or until stopped.
void SleepUnlessStopped(double seconds) {
  std::unique_lock<std::mutex> lock(g_mu);
  g_cv.wait_for(lock, std::chrono::duration<double>(seconds), [] { return g_stop.load(); });
}

// --------------------------------------------------------------- the games --
class Envs {
 public:
  Envs(int num_envs, uint64_t seed) : games_(num_envs), next_first_(num_envs), rng_(seed) {
    std::uniform_int_distribution<int> coin(0, 1);
    for (auto& f : next_first_) f = coin(rng_);
    const size_t e = static_cast<size_t>(num_envs);
    obs_.assign(e * kSeats * c4::kObsSize, 0.0f);
    reward_.assign(e * kSeats, 0.0f);
    terminated_.assign(e, 0);
    truncated_.assign(e, 0);
    mask_.assign(e * kSeats * c4::kCols, 0);
    acting_.assign(e * kSeats, 0);
    win_.assign(e * kSeats, 0.0f);
    moves_.assign(e * kSeats, 0.0f);
  }

  int num_envs() const { return static_cast<int>(games_.size()); }

  // Fresh games everywhere; rewards, flags and stats cleared.
  void ResetAll() {
    for (int e = 0; e < num_envs(); ++e) ResetOne(e);
    std::fill(reward_.begin(), reward_.end(), 0.0f);
    std::fill(terminated_.begin(), terminated_.end(), 0);
    std::fill(truncated_.begin(), truncated_.end(), 0);
    std::fill(win_.begin(), win_.end(), 0.0f);
    std::fill(moves_.begin(), moves_.end(), 0.0f);
    Render();
  }

  // Applies the acting seat's action in every env; `actions` is [E, 2] int32.
  // Returns how many actions were illegal (replaced by the first legal column).
  int Step(const int32_t* actions) {
    int illegal = 0;
    std::fill(reward_.begin(), reward_.end(), 0.0f);
    std::fill(terminated_.begin(), terminated_.end(), 0);
    std::fill(win_.begin(), win_.end(), 0.0f);  // stats count only where an episode ends
    std::fill(moves_.begin(), moves_.end(), 0.0f);
    for (int e = 0; e < num_envs(); ++e) {
      c4::Game& g = games_[e];
      const int seat = g.to_move();
      int col = actions[e * kSeats + seat];
      if (!g.Legal(col)) {
        ++illegal;
        col = g.FirstLegal();
      }
      const c4::StepResult r = g.Play(col);
      if (r.done) {
        if (r.winner >= 0) {
          reward_[e * kSeats + r.winner] = 1.0f;
          reward_[e * kSeats + (1 - r.winner)] = -1.0f;
          win_[e * kSeats + r.winner] = 1.0f;
        }
        for (int s = 0; s < kSeats; ++s) moves_[e * kSeats + s] = static_cast<float>(g.moves());
        terminated_[e] = 1;
        ++episodes_;
        ResetOne(e);  // same-step autoreset
      }
    }
    Render();
    return illegal;
  }

  const std::vector<float>& obs() const { return obs_; }
  const std::vector<float>& reward() const { return reward_; }
  const std::vector<uint8_t>& terminated() const { return terminated_; }
  const std::vector<uint8_t>& truncated() const { return truncated_; }
  const std::vector<uint8_t>& mask() const { return mask_; }
  const std::vector<uint8_t>& acting() const { return acting_; }
  // Episode stats [E, 2], set where this step's message ends an episode (0 elsewhere):
  // win = 1 for the seat that won (0 for the loser and for both in a draw);
  // moves = stones the game took, both seats' (7 to 42).
  const std::vector<float>& win() const { return win_; }
  const std::vector<float>& moves() const { return moves_; }
  uint64_t episodes() const { return episodes_; }

 private:
  void ResetOne(int e) {
    games_[e].Reset(next_first_[e]);
    next_first_[e] = 1 - next_first_[e];  // the other seat starts the next game
  }

  void Render() {
    for (int e = 0; e < num_envs(); ++e) {
      const c4::Game& g = games_[e];
      for (int s = 0; s < kSeats; ++s) {
        const size_t row = static_cast<size_t>(e) * kSeats + s;
        g.Observe(s, &obs_[row * c4::kObsSize]);
        g.LegalMask(&mask_[row * c4::kCols]);
        acting_[row] = g.to_move() == s ? 1 : 0;
      }
    }
  }

  std::vector<c4::Game> games_;
  std::vector<int> next_first_;
  std::mt19937_64 rng_;
  std::vector<float> obs_, reward_, win_, moves_;
  std::vector<uint8_t> terminated_, truncated_, mask_, acting_;
  uint64_t episodes_ = 0;
};

// ------------------------------------------------------------------ tensors --
// Tensor is pb1::Tensor or pb2::Tensor: the same fields in both versions.
template <typename Tensor, typename DType>
void SetShape(Tensor* t, DType dtype, std::initializer_list<int64_t> shape) {
  t->set_dtype(dtype);
  t->clear_shape();
  for (int64_t d : shape) t->add_shape(d);
}

template <typename Tensor, typename T>
void SetData(Tensor* t, const std::vector<T>& v) {
  // Little-endian host assumed (x86, ARM): the array's bytes are the wire bytes.
  t->set_data(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The StepBatch fields both versions have under the same names: reward [E, 2] float32, terminated [E],
// truncated [E] and acting [E, 2] bool. ShapeShared sets their shapes once; FillShared their data every step.
template <typename Batch, typename DType>
void ShapeShared(Batch* batch, int64_t num_envs, DType float32, DType boolean) {
  SetShape(batch->mutable_reward(), float32, {num_envs, kSeats});
  SetShape(batch->mutable_terminated(), boolean, {num_envs});
  SetShape(batch->mutable_truncated(), boolean, {num_envs});
  SetShape(batch->mutable_acting(), boolean, {num_envs, kSeats});
}

template <typename Batch>
void FillShared(Batch* batch, const Envs& envs, uint64_t seq) {
  batch->set_sequence(seq);
  SetData(batch->mutable_reward(), envs.reward());
  SetData(batch->mutable_terminated(), envs.terminated());
  SetData(batch->mutable_truncated(), envs.truncated());
  SetData(batch->mutable_acting(), envs.acting());
}

// The raw bytes of an INT32 [num_envs, 2] action tensor, or nullptr with `*problem` saying what it is instead.
template <typename Tensor, typename DType>
const std::string* ActionBytes(const Tensor& a, DType int32, int num_envs, const std::string& name,
                               std::string* problem) {
  const bool shaped = a.shape_size() == 2 && a.shape(0) == num_envs && a.shape(1) == kSeats;
  const size_t want = static_cast<size_t>(num_envs) * kSeats * sizeof(int32_t);
  if (a.dtype() == int32 && shaped && a.data().size() == want) return &a.data();
  std::ostringstream shape;
  for (int i = 0; i < a.shape_size(); ++i) shape << (i ? ", " : "") << a.shape(i);
  std::string dtype = pb1::DType_Name(static_cast<pb1::DType>(a.dtype()));  // both versions number DType alike
  if (dtype.empty()) dtype = std::to_string(static_cast<int>(a.dtype()));
  *problem = name + " has dtype " + dtype + ", shape [" + shape.str() +
             "] and " + std::to_string(a.data().size()) + " bytes, expected INT32 [" + std::to_string(num_envs) +
             ", 2]";
  return nullptr;
}

// ----------------------------------------------------------------- messages --
// One protocol version's messages: the handshake request, the StepBatch rebuilt
// in place every step (only the tensors' data changes), and the actions read
// from an ActionBatch. Worker::Session is written once over either.

// Version 1 (proto/seedleague/v1/env.proto): one observation tensor, one action tensor, no names.
class V1Messages {
 public:
  using Service = pb1::EnvService;
  using HandshakeResponse = pb1::HandshakeResponse;
  using StepBatch = pb1::StepBatch;
  using ActionBatch = pb1::ActionBatch;
  static constexpr uint32_t kVersion = 1;

  V1Messages(int num_envs, const std::string& worker_name) : num_envs_(num_envs) {
    request_.set_protocol_version(kVersion);
    request_.set_worker_name(worker_name);
    pb1::EnvSpec* spec = request_.mutable_spec();
    spec->set_env_name(kEnvName);
    spec->mutable_observation()->set_dtype(pb1::FLOAT32);
    // [planes, rows, cols]: [C, H, W] planes, so the host gives the game its convolutional board torso.
    for (int64_t d : {c4::kPlanes, c4::kRows, c4::kCols}) spec->mutable_observation()->add_shape(d);
    spec->mutable_action()->set_num_actions(c4::kCols);
    spec->set_num_envs(num_envs);
    spec->set_num_seats(kSeats);
    spec->set_has_legal_mask(true);
    spec->set_return_bound(1.0f);  // a game won or lost

    const int64_t e = num_envs;
    SetShape(batch_.mutable_observation(), pb1::FLOAT32, {e, kSeats, c4::kPlanes, c4::kRows, c4::kCols});
    SetShape(batch_.mutable_legal_mask(), pb1::BOOL, {e, kSeats, c4::kCols});
    ShapeShared(&batch_, e, pb1::FLOAT32, pb1::BOOL);
  }

  const pb1::HandshakeRequest& request() const { return request_; }
  StepBatch& batch() { return batch_; }

  void Fill(const Envs& envs, uint64_t seq) {
    FillShared(&batch_, envs, seq);
    SetData(batch_.mutable_observation(), envs.obs());
    SetData(batch_.mutable_legal_mask(), envs.mask());
  }

  const std::string* Actions(const ActionBatch& actions, std::string* problem) const {
    return ActionBytes(actions.action(), pb1::INT32, num_envs_, "action tensor", problem);
  }

 private:
  int num_envs_;
  pb1::HandshakeRequest request_;
  StepBatch batch_;
};

// Version 2 (proto/seedleague/v2/env.proto): the same game with names, teams and episode stats. Connect Four
// cannot be cut off (a full board is a draw, terminated), so `truncated` is always false and no
// final_observation is ever sent.
class V2Messages {
 public:
  using Service = pb2::EnvService;
  using HandshakeResponse = pb2::HandshakeResponse;
  using StepBatch = pb2::StepBatch;
  using ActionBatch = pb2::ActionBatch;
  static constexpr uint32_t kVersion = 2;
  static constexpr const char* kBoard = "board";    // the observation tensor
  static constexpr const char* kColumn = "column";  // the action head (and its legal mask)

  V2Messages(int num_envs, const std::string& worker_name) : num_envs_(num_envs) {
    request_.set_protocol_version(kVersion);
    request_.set_worker_name(worker_name);
    pb2::EnvSpec* spec = request_.mutable_spec();
    spec->set_env_name(kEnvName);
    pb2::ObservationTensorSpec* board = spec->add_observation();
    board->set_name(kBoard);
    board->set_dtype(pb2::FLOAT32);
    for (int64_t d : {c4::kPlanes, c4::kRows, c4::kCols}) board->add_shape(d);  // [C, H, W]: the board torso
    pb2::ActionHeadSpec* column = spec->add_action();
    column->set_name(kColumn);
    column->mutable_discrete()->set_num_actions(c4::kCols);
    column->mutable_discrete()->set_has_legal_mask(true);
    spec->set_num_envs(num_envs);
    spec->set_num_seats(kSeats);
    for (const char* stat : {"win", "moves"}) spec->add_episode_stats(stat);
    for (int seat = 0; seat < kSeats; ++seat) spec->add_seat_team(seat);  // two teams of one seat
    spec->set_return_bound(1.0f);  // a game won or lost

    const int64_t e = num_envs;
    obs_ = Named(batch_.add_observation(), kBoard);
    SetShape(obs_, pb2::FLOAT32, {e, kSeats, c4::kPlanes, c4::kRows, c4::kCols});
    mask_ = Named(batch_.add_legal_mask(), kColumn);
    SetShape(mask_, pb2::BOOL, {e, kSeats, c4::kCols});
    ShapeShared(&batch_, e, pb2::FLOAT32, pb2::BOOL);
    win_ = Named(batch_.add_episode_stats(), "win");
    SetShape(win_, pb2::FLOAT32, {e, kSeats});
    moves_ = Named(batch_.add_episode_stats(), "moves");
    SetShape(moves_, pb2::FLOAT32, {e, kSeats});
  }

  const pb2::HandshakeRequest& request() const { return request_; }
  StepBatch& batch() { return batch_; }

  void Fill(const Envs& envs, uint64_t seq) {
    FillShared(&batch_, envs, seq);
    SetData(obs_, envs.obs());
    SetData(mask_, envs.mask());
    SetData(win_, envs.win());
    SetData(moves_, envs.moves());
  }

  // The host answers one NamedTensor per head: here exactly one, "column".
  const std::string* Actions(const ActionBatch& actions, std::string* problem) const {
    if (actions.action_size() != 1 || actions.action(0).name() != kColumn) {
      std::string names;
      for (const auto& a : actions.action()) names += (names.empty() ? "'" : ", '") + a.name() + "'";
      *problem = "action holds heads [" + names + "], expected exactly ['column']";
      return nullptr;
    }
    return ActionBytes(actions.action(0).tensor(), pb2::INT32, num_envs_, "action head 'column'", problem);
  }

 private:
  static pb2::Tensor* Named(pb2::NamedTensor* named, const char* name) {
    named->set_name(name);
    return named->mutable_tensor();
  }

  int num_envs_;
  pb2::HandshakeRequest request_;
  StepBatch batch_;
  pb2::Tensor *obs_, *mask_, *win_, *moves_;  // owned by batch_
};

// ------------------------------------------------------------------ errors --
// kNoV2: the host has no seedleague.v2.EnvService (UNIMPLEMENTED at the v2 handshake).
enum class Outcome { kStopped, kDone, kRetry, kRefused, kNoV2 };

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return "OK";
    case grpc::CANCELLED: return "CANCELLED";
    case grpc::UNKNOWN: return "UNKNOWN";
    case grpc::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND: return "NOT_FOUND";
    case grpc::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::ABORTED: return "ABORTED";
    case grpc::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::INTERNAL: return "INTERNAL";
    case grpc::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::DATA_LOSS: return "DATA_LOSS";
    default: return "?";
  }
}

// The protocol's table (docs/protocol.md section 6): lost connection => retry.
// INTERNAL/UNKNOWN/ABORTED/DATA_LOSS are what gRPC libraries report for a reset
// transport (a host restart); the host never refuses with them.
bool Retriable(const grpc::Status& status, bool on_stream) {
  switch (status.error_code()) {
    case grpc::UNAVAILABLE:
    case grpc::CANCELLED:
    case grpc::DEADLINE_EXCEEDED:
    case grpc::INTERNAL: case grpc::UNKNOWN: case grpc::ABORTED: case grpc::DATA_LOSS:
      return true;
    case grpc::FAILED_PRECONDITION:
      return on_stream;  // unknown/closed session: handshake again
    default:
      return false;
  }
}

// From the worker's side a TLS mismatch looks like an unreachable host: say what to check.
const char* TlsHint(const grpc::Status& status, bool tls) {
  if (status.error_code() != grpc::UNAVAILABLE) return "";
  return tls ? " (check that the host serves TLS with a certificate signed by --tls-ca for this address)"
             : " (if the host serves TLS, pass its CA with --tls-ca)";
}

Outcome Classify(const grpc::Status& status, bool on_stream, const char* what, bool tls) {
  if (g_stop.load()) return Outcome::kStopped;
  if (status.ok() && on_stream) {
    std::fprintf(stderr, "connect_four_worker: %s: stream ended without an answer; reconnecting\n", what);
    return Outcome::kRetry;
  }
  if (Retriable(status, on_stream)) {
    std::fprintf(stderr, "connect_four_worker: %s: lost the host (%s: %s)%s\n", what,
                 CodeName(status.error_code()), status.error_message().c_str(),
                 on_stream ? "" : TlsHint(status, tls));
    return Outcome::kRetry;
  }
  std::fprintf(stderr, "connect_four_worker: %s: host refused: %s: %s\n", what, CodeName(status.error_code()),
               status.error_message().c_str());
  return Outcome::kRefused;
}

// ------------------------------------------------------------------ worker --
class Worker {
 public:
  Worker(const Flags& flags, const TlsFiles& tls)
      : flags_(flags), tls_(tls), envs_(flags.num_envs, flags.seed), protocol_(flags.protocol) {
    const char* token = std::getenv("SEEDLEAGUE_TOKEN");
    if (token != nullptr && token[0] != '\0') token_ = token;
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    worker_name_ = std::string(host) + ":" + std::to_string(getpid());
  }

  int Run() {
    std::mt19937_64 jitter_rng(flags_.seed ^ 0x9e3779b97f4a7c15ULL);
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    V1Messages v1(flags_.num_envs, worker_name_);
    V2Messages v2(flags_.num_envs, worker_name_);
    int attempt = 0;
    while (!g_stop.load() && !BudgetSpent()) {
      const Outcome outcome = protocol_ == 2 ? Session(&v2, &attempt) : Session(&v1, &attempt);
      if (outcome == Outcome::kStopped || outcome == Outcome::kDone) break;
      if (outcome == Outcome::kRefused) return 2;
      if (outcome == Outcome::kNoV2) {  // a host from before protocol 2: the same game on version 1, no stats
        std::fprintf(stderr, "connect_four_worker: the host has no protocol 2 service (UNIMPLEMENTED); "
                             "speaking protocol 1 (no episode stats)\n");
        protocol_ = 1;
        continue;
      }
      const double delay =
          std::min(flags_.backoff_initial_s * std::pow(2.0, attempt), flags_.backoff_max_s) * jitter(jitter_rng);
      ++attempt;
      ++reconnects_;
      std::fprintf(stderr, "connect_four_worker: reconnecting to %s in %.2f s\n", flags_.address.c_str(), delay);
      SleepUnlessStopped(delay);
    }
    std::fprintf(stderr,
                 "connect_four_worker: stopped: %llu steps, %llu env steps, %llu episodes, %d sessions, "
                 "%d reconnects, policy version %llu\n",
                 (unsigned long long)steps_, (unsigned long long)env_steps_,
                 (unsigned long long)envs_.episodes(), sessions_, reconnects_,
                 (unsigned long long)policy_version_);
    return 0;
  }

 private:
  bool BudgetSpent() const { return flags_.max_steps > 0 && env_steps_ >= static_cast<uint64_t>(flags_.max_steps); }

  void Authorize(grpc::ClientContext* context) const {
    if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  }

  std::shared_ptr<grpc::Channel> NewChannel() const {
    grpc::ChannelArguments args;
    // Short reconnect backoff inside gRPC; our own backoff paces the retries.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    args.SetMaxSendMessageSize(-1);
    args.SetMaxReceiveMessageSize(64 * 1024 * 1024);
    return grpc::CreateCustomChannel(flags_.address, Credentials(&args), args);
  }

  // TLS trusting --tls-ca (with the client certificate, if given), or plaintext.
  std::shared_ptr<grpc::ChannelCredentials> Credentials(grpc::ChannelArguments* args) const {
    if (!Tls()) return grpc::InsecureChannelCredentials();
    if (!flags_.tls_server_name.empty()) args->SetSslTargetNameOverride(flags_.tls_server_name);
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = tls_.ca;
    options.pem_cert_chain = tls_.cert;
    options.pem_private_key = tls_.key;
    return grpc::SslCredentials(options);
  }

  bool Tls() const { return !flags_.tls_ca.empty(); }

  // One session over protocol version M::kVersion (V1Messages or V2Messages): handshake, stream until stopped
  // or the connection breaks.
  template <typename M>
  Outcome Session(M* messages, int* attempt) {
    auto channel = NewChannel();
    auto stub = M::Service::NewStub(channel);

    typename M::HandshakeResponse reply;
    {
      grpc::ClientContext context;
      Authorize(&context);
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(static_cast<int64_t>(flags_.connect_timeout_s * 1000)));
      SetLiveCall(&context);
      grpc::Status status = stub->Handshake(&context, messages->request(), &reply);
      SetLiveCall(nullptr);
      if (M::kVersion == 2 && status.error_code() == grpc::UNIMPLEMENTED && !g_stop.load()) return Outcome::kNoV2;
      if (!status.ok()) return Classify(status, /*on_stream=*/false, "handshake", Tls());
    }
    if (reply.protocol_version() != M::kVersion) {
      std::fprintf(stderr, "connect_four_worker: host speaks protocol version %u, this worker speaks %u\n",
                   reply.protocol_version(), M::kVersion);
      return Outcome::kRefused;
    }
    ++sessions_;
    std::fprintf(stderr, "connect_four_worker: connected to %s%s as %s: session %s (%d envs x 2 seats, protocol %u)\n",
                 flags_.address.c_str(), Tls() ? " over TLS" : "", worker_name_.c_str(), reply.session_id().c_str(),
                 flags_.num_envs, M::kVersion);

    envs_.ResetAll();  // fresh episodes on every session
    typename M::StepBatch& batch = messages->batch();
    batch.set_session_id(reply.session_id());
    uint64_t seq = 0;
    messages->Fill(envs_, seq);
    if (reply.max_message_bytes() > 0 && static_cast<int64_t>(batch.ByteSizeLong()) > reply.max_message_bytes()) {
      std::fprintf(stderr,
                   "connect_four_worker: one step is %zu bytes but the host accepts at most %lld; "
                   "use fewer --num-envs\n",
                   batch.ByteSizeLong(), (long long)reply.max_message_bytes());
      return Outcome::kRefused;
    }

    grpc::ClientContext context;
    Authorize(&context);
    SetLiveCall(&context);
    auto stream = stub->Stream(&context);
    typename M::ActionBatch actions;
    Outcome outcome = Outcome::kRetry;
    bool broken = false;
    while (true) {
      if (g_stop.load() || BudgetSpent()) {
        outcome = g_stop.load() ? Outcome::kStopped : Outcome::kDone;
        stream->WritesDone();  // close our side of the stream
        context.TryCancel();
        break;
      }
      if (!stream->Write(batch) || !stream->Read(&actions)) {
        broken = true;
        break;
      }
      if (actions.sequence() != seq) {
        std::fprintf(stderr, "connect_four_worker: host answered sequence %llu to step %llu\n",
                     (unsigned long long)actions.sequence(), (unsigned long long)seq);
        outcome = Outcome::kRefused;
        context.TryCancel();
        break;
      }
      std::string problem;
      const std::string* data = messages->Actions(actions, &problem);
      if (data == nullptr) {
        std::fprintf(stderr, "connect_four_worker: %s\n", problem.c_str());
        outcome = Outcome::kRefused;
        context.TryCancel();
        break;
      }
      *attempt = 0;  // a successful step resets the backoff
      policy_version_ = actions.policy_version();
      Play(*data);
      ++seq;
      messages->Fill(envs_, seq);
    }
    grpc::Status status = stream->Finish();
    SetLiveCall(nullptr);
    if (broken) return Classify(status, /*on_stream=*/true, "stream", Tls());
    return outcome;
  }

  // Steps every env with the acting seats' actions (`data`: INT32 [E, 2], already checked for size).
  void Play(const std::string& data) {
    action_buf_.resize(static_cast<size_t>(flags_.num_envs) * kSeats);
    std::memcpy(action_buf_.data(), data.data(), action_buf_.size() * sizeof(int32_t));
    const int illegal = envs_.Step(action_buf_.data());
    if (illegal > 0 && !warned_illegal_) {
      std::fprintf(stderr, "connect_four_worker: host sent %d illegal action(s); played the first legal column\n",
                   illegal);
      warned_illegal_ = true;
    }
    ++steps_;
    env_steps_ += flags_.num_envs;
  }

  Flags flags_;
  TlsFiles tls_;
  Envs envs_;
  int protocol_;  // the version the next session handshakes with (2 falls back to 1 on a host without v2)
  std::string token_;
  std::string worker_name_;
  std::vector<int32_t> action_buf_;
  uint64_t steps_ = 0, env_steps_ = 0, policy_version_ = 0;
  int sessions_ = 0, reconnects_ = 0;
  bool warned_illegal_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    Usage(argv[0]);
    return 2;
  }
  TlsFiles tls;
  if (!ReadTlsFiles(flags, &tls)) return 2;
  // Block the stop signals before gRPC starts threads, so only sigwait sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(SignalThread, set).detach();

  Worker worker(flags, tls);
  const int rc = worker.Run();
  std::fflush(stderr);
  // Skip static destructors racing gRPC's background threads.
  std::_Exit(rc);
}
