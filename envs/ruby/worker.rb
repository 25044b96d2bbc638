#!/usr/bin/env ruby
# frozen_string_literal: true

# A seedleague env worker in Ruby: tic-tac-toe for two seats, turn-based, with legal
# masks and zero-sum rewards. Written from docs/protocol.md and
# proto/seedleague/v1/env.proto alone, with no seedleague code; the stubs are generated
# by `make ruby-worker` (grpc_tools_ruby_protoc) into build/ruby. See envs/ruby/README.md.
#
# The file has three parts: the game (TicTacToe, the part a game team replaces), the
# protocol's [env, seat, ...] buffers for --num-envs games (VectorGame), and the session
# and reconnect loop of docs/protocol.md sections 1, 6 and 7 (Worker).

require 'optparse'
require 'socket'

# --- The game -------------------------------------------------------------------------

# One game of tic-tac-toe. Seat 0 plays first. Cells hold nil, 0 or 1 (the seat).
class TicTacToe
  LINES = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8],
           [0, 4, 8], [2, 4, 6]].freeze
  NUM_ACTIONS = 9
  # Two 3x3 planes seen from one seat: its own marks, then the opponent's.
  OBSERVATION_SIZE = 18

  attr_reader :to_move

  def initialize
    @cells = Array.new(9)
    @to_move = 0
  end

  def legal?(cell)
    @cells[cell].nil?
  end

  # Plays `cell` for the seat to move; returns [rewards per seat, game over?].
  def play(cell)
    raise ArgumentError, "cell #{cell} is taken" unless legal?(cell)

    @cells[cell] = @to_move
    if LINES.any? { |line| line.all? { |c| @cells[c] == @to_move } }
      rewards = [-1.0, -1.0]
      rewards[@to_move] = 1.0
      return [rewards, true]
    end
    return [[0.0, 0.0], true] if @cells.none?(&:nil?)

    @to_move = 1 - @to_move
    [[0.0, 0.0], false]
  end

  # The board from `seat`'s side: 1.0 where it has a mark (plane 0), where the other
  # seat has one (plane 1).
  def observation(seat)
    own = @cells.map { |c| c == seat ? 1.0 : 0.0 }
    other = @cells.map { |c| !c.nil? && c != seat ? 1.0 : 0.0 }
    own + other
  end
end

# --- num_envs games in the protocol's buffers -------------------------------------------

# Steps `num_envs` games together and keeps the StepBatch's arrays, indexed [env, seat].
# Same-step autoreset (docs/protocol.md section 5): a game that ends is replaced at once,
# and the next message carries its final rewards, terminated = true and the new game's
# first observation.
class VectorGame
  SEATS = 2

  attr_reader :num_envs, :reward, :terminated

  def initialize(num_envs)
    @num_envs = num_envs
    reset_all
  end

  def reset_all
    @games = Array.new(@num_envs) { TicTacToe.new }
    @reward = Array.new(@num_envs * SEATS, 0.0)
    @terminated = Array.new(@num_envs, false)
  end

  # actions: flat [env, seat] integers; only the seat to move in each game acts.
  def step(actions)
    @games.each_with_index do |game, e|
      rewards, over = game.play(actions[e * SEATS + game.to_move])
      @reward[e * SEATS, SEATS] = rewards
      @terminated[e] = over
      @games[e] = TicTacToe.new if over
    end
  end

  # [env, seat] of the first seat to move whose action is not a legal cell, or nil.
  def illegal_choice(actions)
    @games.each_with_index do |game, e|
      cell = actions[e * SEATS + game.to_move]
      return [e, game.to_move] unless cell.between?(0, TicTacToe::NUM_ACTIONS - 1) && game.legal?(cell)
    end
    nil
  end

  def observation
    @games.flat_map { |g| (0...SEATS).flat_map { |s| g.observation(s) } }
  end

  def acting
    @games.flat_map { |g| (0...SEATS).map { |s| s == g.to_move } }
  end

  # Both seats get the empty cells; only the acting seat's row matters to the host.
  def legal_mask
    @games.flat_map do |g|
      row = (0...TicTacToe::NUM_ACTIONS).map { |a| g.legal?(a) }
      row + row
    end
  end
end

# --- Options ------------------------------------------------------------------------------

def parse_options(argv)
  options = {
    address: ENV.fetch('SEEDLEAGUE_ADDRESS', nil), num_envs: 16, seed: 0, max_steps: 0,
    stubs: File.expand_path('../../build/ruby', __dir__),
    backoff_initial: 0.1, backoff_max: 5.0
  }
  OptionParser.new do |o|
    o.banner = 'usage: ruby envs/ruby/worker.rb --address HOST:PORT [options]'
    o.on('--address HOST:PORT', 'host to connect to (default: $SEEDLEAGUE_ADDRESS)') { |v| options[:address] = v }
    o.on('--num-envs N', Integer, 'games stepped together (default 16)') { |v| options[:num_envs] = v }
    o.on('--seed N', Integer, 'accepted for `train --worker-cmd ... {seed}`; the game has no randomness') { |v| options[:seed] = v }
    o.on('--max-steps N', Integer, 'stop after N steps in all, 0 = run until SIGTERM (default 0)') { |v| options[:max_steps] = v }
    o.on('--stubs DIR', 'generated Ruby stubs (default: build/ruby of this repository)') { |v| options[:stubs] = v }
    o.on('--backoff-max S', Float, 'cap of the reconnect backoff in seconds (default 5)') { |v| options[:backoff_max] = v }
  end.parse!(argv)
  refuse('--address HOST:PORT (or $SEEDLEAGUE_ADDRESS) is required') if options[:address].to_s.empty?
  refuse("--num-envs must be >= 1, got #{options[:num_envs]}") if options[:num_envs] < 1
  if options[:backoff_max] < options[:backoff_initial]
    refuse("--backoff-max must be >= #{options[:backoff_initial]} s (the first wait), got #{options[:backoff_max]}")
  end
  options
rescue OptionParser::ParseError => e
  refuse(e.message)
end

# A refusal of the worker itself or from the host: say why and exit 2, which
# `seedleague train` reads as "do not restart" (docs/protocol.md section 12).
def refuse(message)
  warn "ruby-worker: #{message}"
  exit 2
end

# --- Protocol -------------------------------------------------------------------------------

def load_stubs(dir)
  unless File.exist?(File.join(dir, 'seedleague', 'v1', 'env_services_pb.rb'))
    refuse("no generated stubs in #{dir}: run `make ruby-worker` (or pass --stubs DIR)")
  end
  $LOAD_PATH.unshift(dir)
  require 'grpc'
  require 'seedleague/v1/env_services_pb'
end

# The requests of one Stream call. gRPC's Ruby client reads them from `each` in its own
# thread; `close` ends the enumeration, which half-closes the stream (WritesDone).
class RequestQueue
  CLOSE = Object.new.freeze

  def initialize
    @queue = Queue.new
  end

  def push(message)
    @queue << message
  end

  def close
    @queue << CLOSE
  end

  def each
    loop do
      message = @queue.pop
      break if message.equal?(CLOSE)

      yield message
    end
  end
end

# The host ended the stream with OK before answering, or answered nonsense: drop the
# stream and reconnect (sections 6 and 10).
class StreamEnded < StandardError; end

# docs/protocol.md section 6: a worker gives up on exactly these statuses, and on
# FAILED_PRECONDITION at handshake; every other status means reconnect.
GIVE_UP_CODES = %w[INVALID_ARGUMENT RESOURCE_EXHAUSTED UNAUTHENTICATED PERMISSION_DENIED
                   UNIMPLEMENTED NOT_FOUND ALREADY_EXISTS OUT_OF_RANGE].freeze

def status_name(code)
  GRPC::Core::StatusCodes.constants.find { |c| GRPC::Core::StatusCodes.const_get(c) == code }.to_s
end

def give_up?(error, at_handshake)
  name = status_name(error.code)
  GIVE_UP_CODES.include?(name) || (at_handshake && name == 'FAILED_PRECONDITION')
end

# One session: Handshake, then the lockstep Stream until stopped or the call fails.
class Worker
  def initialize(options)
    @options = options
    @stub = Seedleague::V1::EnvService::Stub.new(options[:address], :this_channel_is_insecure)
    token = ENV.fetch('SEEDLEAGUE_TOKEN', '')
    @metadata = token.empty? ? {} : { 'authorization' => "Bearer #{token}" }
    @game = VectorGame.new(options[:num_envs])
    @stopping = false
    @steps = 0
  end

  def stop
    @stopping = true
  end

  def stopping?
    @stopping || (@options[:max_steps].positive? && @steps >= @options[:max_steps])
  end

  def spec
    Seedleague::V1::EnvSpec.new(
      env_name: 'ruby-tic-tac-toe',
      observation: Seedleague::V1::TensorSpec.new(dtype: :FLOAT32, shape: [TicTacToe::OBSERVATION_SIZE]),
      action: Seedleague::V1::ActionSpec.new(num_actions: TicTacToe::NUM_ACTIONS),
      num_envs: @game.num_envs, num_seats: VectorGame::SEATS, has_legal_mask: true,
      return_bound: 1.0 # a game won, lost or drawn
    )
  end

  def handshake
    request = Seedleague::V1::HandshakeRequest.new(
      protocol_version: 1, spec: spec, worker_name: "#{Socket.gethostname}:#{Process.pid}"
    )
    reply = @stub.handshake(request, metadata: @metadata, deadline: Time.now + 10)
    refuse("host speaks protocol version #{reply.protocol_version}, this worker speaks 1") if reply.protocol_version != 1
    reply
  end

  # Runs one session. Returns when stopped; raises GRPC::BadStatus or StreamEnded.
  def run_session(on_step)
    @in_handshake = true
    session_id = handshake.session_id
    @in_handshake = false
    @game.reset_all # section 7: fresh episodes in every env on every new session
    requests = RequestQueue.new
    call = @stub.stream(requests, metadata: @metadata, return_op: true)
    responses = call.execute
    sequence = 0
    loop do
      requests.push(step_batch(session_id, sequence))
      actions = checked_actions(responses.next, sequence)
      on_step.call
      @game.step(actions)
      @steps += 1
      sequence += 1
      return if stopping?
    end
  rescue StopIteration
    raise StreamEnded, 'the host ended the stream without an answer'
  rescue StreamEnded
    call.cancel # a host that answers nonsense gets no more steps on this stream
    raise
  ensure
    requests&.close
  end

  # The reply's actions, flat [env, seat]; StreamEnded unless it answers step `sequence`
  # with INT32 [num_envs, 2] and a legal move for every seat to move.
  def checked_actions(reply, sequence)
    raise StreamEnded, "host answered sequence #{reply.sequence} to step #{sequence}" if reply.sequence != sequence

    shape = [@game.num_envs, VectorGame::SEATS]
    action = reply.action
    if action.nil? || action.dtype != :INT32 || action.shape.to_a != shape || action.data.bytesize != 4 * shape.inject(:*)
      raise StreamEnded, "host sent actions #{action&.dtype}#{action&.shape.to_a}, expected INT32#{shape}"
    end
    actions = action.data.unpack('l<*')
    bad = @game.illegal_choice(actions)
    raise StreamEnded, "host chose illegal move #{actions[bad[0] * VectorGame::SEATS + bad[1]]} for env #{bad[0]} seat #{bad[1]}" if bad

    actions
  end

  def step_batch(session_id, sequence)
    e = @game.num_envs
    s = VectorGame::SEATS
    Seedleague::V1::StepBatch.new(
      session_id: session_id, sequence: sequence,
      observation: tensor(:FLOAT32, [e, s, TicTacToe::OBSERVATION_SIZE], @game.observation.pack('e*')),
      reward: tensor(:FLOAT32, [e, s], @game.reward.pack('e*')),
      terminated: tensor(:BOOL, [e], bools(@game.terminated)),
      truncated: tensor(:BOOL, [e], "\0".b * e),
      legal_mask: tensor(:BOOL, [e, s, TicTacToe::NUM_ACTIONS], bools(@game.legal_mask)),
      acting: tensor(:BOOL, [e, s], bools(@game.acting))
    )
  end

  def tensor(dtype, shape, data)
    Seedleague::V1::Tensor.new(dtype: dtype, shape: shape, data: data)
  end

  def bools(values)
    values.map { |v| v ? 1 : 0 }.pack('C*')
  end

  # Sections 6 and 7: reconnect with capped exponential backoff and jitter, reset after
  # a successful step; give up (exit 2) on a refusal.
  def run
    backoff = @options[:backoff_initial]
    until stopping?
      begin
        run_session(-> { backoff = @options[:backoff_initial] })
      rescue GRPC::BadStatus => e
        refuse("host refused: #{status_name(e.code)}: #{e.details}") if give_up?(e, @in_handshake)
        warn "ruby-worker: connection lost (#{status_name(e.code)}: #{e.details}); " \
             "reconnecting in #{format('%.2f', backoff)} s"
        sleep_unless_stopped(backoff * rand(0.5..1.5))
        backoff = [backoff * 2, @options[:backoff_max]].min
      rescue StreamEnded => e
        warn "ruby-worker: #{e.message}; reconnecting"
        sleep_unless_stopped(backoff * rand(0.5..1.5))
        backoff = [backoff * 2, @options[:backoff_max]].min
      end
    end
  end

  def sleep_unless_stopped(seconds)
    deadline = Time.now + seconds
    # clamped at 0: the deadline can pass between the loop's test and the subtraction (Kernel#sleep raises on < 0)
    sleep([[deadline - Time.now, 0.05].min, 0].max) while !stopping? && Time.now < deadline
  end
end

if $PROGRAM_NAME == __FILE__
  options = parse_options(ARGV)
  load_stubs(options[:stubs])
  worker = Worker.new(options)
  # SIGTERM / Ctrl-C: finish the current step, close the stream, exit 0.
  %w[TERM INT].each { |signal| Signal.trap(signal) { worker.stop } }
  worker.run
  exit 0
end
