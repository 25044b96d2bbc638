// Connect Four (7 columns x 6 rows, two seats), stepped natively for the
// seedleague C++ worker. Header-only; no gRPC here.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

namespace c4 {

constexpr int kRows = 6;
constexpr int kCols = 7;
constexpr int kCells = kRows * kCols;
constexpr int kPlanes = 2;  // own stones, opponent's stones
constexpr int kObsSize = kPlanes * kCells;  // planes [own, opponent] x rows x cols

struct StepResult {
  bool done = false;
  int winner = -1;  // seat that won, -1 for a draw or a game still running
};

class Game {
 public:
  // Starts a fresh game in which `first_seat` moves first.
  void Reset(int first_seat) {
    board_.fill(-1);
    heights_.fill(0);
    to_move_ = first_seat;
    moves_ = 0;
  }

  int to_move() const { return to_move_; }
  int moves() const { return moves_; }  // stones played in this game so far (both seats)
  bool Legal(int col) const { return col >= 0 && col < kCols && heights_[col] < kRows; }

  // Drops the mover's stone in `col` (must be legal) and passes the turn.
  StepResult Play(int col) {
    const int row = heights_[col]++;
    const int seat = to_move_;
    board_[row * kCols + col] = static_cast<int8_t>(seat);
    ++moves_;
    StepResult result;
    if (Wins(row, col, seat)) {
      result.done = true;
      result.winner = seat;
    } else if (moves_ == kCells) {
      result.done = true;
    }
    to_move_ = 1 - seat;
    return result;
  }

  // Observation of `seat`: out[0 .. 41] own stones, out[42 .. 83] opponent's,
  // each plane row-major with row 0 the bottom row; 1.0 where a stone is.
  void Observe(int seat, float* out) const {
    for (int i = 0; i < kCells; ++i) {
      const int8_t s = board_[i];
      out[i] = (s == seat) ? 1.0f : 0.0f;
      out[kCells + i] = (s == 1 - seat) ? 1.0f : 0.0f;
    }
  }

  void LegalMask(uint8_t* out) const {
    for (int c = 0; c < kCols; ++c) out[c] = Legal(c) ? 1 : 0;
  }

  int FirstLegal() const {
    for (int c = 0; c < kCols; ++c)
      if (Legal(c)) return c;
    return -1;
  }

 private:
  int8_t At(int row, int col) const {
    if (row < 0 || row >= kRows || col < 0 || col >= kCols) return -1;
    return board_[row * kCols + col];
  }

  bool Wins(int row, int col, int seat) const {
    static constexpr int kDirs[4][2] = {{0, 1}, {1, 0}, {1, 1}, {1, -1}};
    for (const auto& d : kDirs) {
      int count = 1;
      for (int sign = -1; sign <= 1; sign += 2) {
        int r = row + sign * d[0], c = col + sign * d[1];
        while (At(r, c) == seat) {
          ++count;
          r += sign * d[0];
          c += sign * d[1];
        }
      }
      if (count >= 4) return true;
    }
    return false;
  }

  std::array<int8_t, kCells> board_{};
  std::array<int8_t, kCols> heights_{};
  int to_move_ = 0;
  int moves_ = 0;
};

}  // namespace c4
