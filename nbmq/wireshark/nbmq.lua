-- nbmq over UDP (nbmq 0.2.0 wire format, seed 000): fields, malformed-frame expert info and
-- message reassembly. Shipped with the nbmq Python package; `nbmq wireshark install` copies it
-- to the personal Lua plugin folder. Every integer is big-endian.
--   DataFrame (kind 0):    version u8 | kind u8 | session_id u64 | message_id u64 | part_count u8
--                          | part_index u8 | message_size u32 | part_size u32 | chunk_size u16
--                          | chunk_offset u32 | chunk (chunk_size bytes, at most 466)
--   ControlFrame (1..5):   version u8 | kind u8 | session_id u64 | payload
-- Secure mode (docs/secure.md) sets the version byte to 0x81: Connect and Connected carry a Noise
-- IK handshake message as payload; every other frame keeps its plain header, then a counter u64
-- and the encrypted chunk or payload with its 16-byte tag. Headers are shown; content is not.
-- A sealed bundle (version 0x82) holds several sealed frames of one session under one seal:
-- count u8 | per frame: ciphertext length u16, its clear header (version 0x81) | counter u64
-- | the frames' ciphertexts back to back | tag; each frame is shown with its header and
-- ciphertext, and a malformed bundle is flagged in the words of the codec's bundle_layout.
-- Claiming: with Decode As (udp.port) every datagram is dissected and any frame the codec
-- rejects gets an expert-info error in the codec's words (nbmq.wire.FRAME_ERROR_REASONS, as
-- DecodeError prints them: "<reason> (at byte <offset>)"). Without it the heuristic claims
-- datagrams that start with version 1 (or 0x81, secure) and a kind 0..5 and hold at least a
-- control header (10 bytes): valid frames, and malformed ones worth flagging, so other UDP traffic is left alone.
-- Reassembly: chunks are collected per (sender, session, message id); the frame that completes
-- a message shows it whole (id, part sizes, parts, a "Reassembled nbmq message" tab) and every
-- other frame of it links there (nbmq.reassembled_in). A message is complete when the sizes
-- of its received parts add up to message_size and each of those parts is whole (absent parts
-- are empty: the reference sends no frame for an empty part). tshark needs two passes (-2) for
-- the links of frames before the completing one.
-- Filters: nbmq.session_id == 0x..., nbmq.kind == 5, nbmq.message_id, nbmq.ack_hash,
--   nbmq.reassembled_in, nbmq.message.id, _ws.expert.message contains "nbmq"

local nbmq = Proto("nbmq", "nbmq messaging (UDP)")

local KINDS = { [0] = "Data", [1] = "Connect", [2] = "Connected", [3] = "Disconnected",
                [4] = "Heartbeat", [5] = "Ack" }
local VERSION, DATA_HEADER, CONTROL_HEADER, MAX_FRAME = 1, 34, 10, 500
local SECURE_VERSION, COUNTER, TAG = 0x81, 8, 16
local SEAL = COUNTER + TAG  -- bytes a sealed frame adds to its plain frame
local BUNDLE_VERSION, BUNDLE_HEAD, BUNDLE_ENTRY = 0x82, 2, 2

local f = {
  version      = ProtoField.uint8("nbmq.version", "Version", base.DEC),
  kind         = ProtoField.uint8("nbmq.kind", "Kind", base.DEC, KINDS),
  session_id   = ProtoField.uint64("nbmq.session_id", "Session ID", base.HEX),
  message_id   = ProtoField.uint64("nbmq.message_id", "Message ID", base.HEX),
  part_count   = ProtoField.uint8("nbmq.part_count", "Part count", base.DEC),
  part_index   = ProtoField.uint8("nbmq.part_index", "Part index", base.DEC),
  message_size = ProtoField.uint32("nbmq.message_size", "Message size", base.DEC),
  part_size    = ProtoField.uint32("nbmq.part_size", "Part size", base.DEC),
  chunk_size   = ProtoField.uint16("nbmq.chunk_size", "Chunk size", base.DEC),
  chunk_offset = ProtoField.uint32("nbmq.chunk_offset", "Chunk offset", base.DEC),
  chunk        = ProtoField.bytes("nbmq.chunk", "Chunk"),
  payload      = ProtoField.bytes("nbmq.payload", "Payload"),
  secure       = ProtoField.bool("nbmq.secure", "Secure mode (content encrypted)"),
  counter      = ProtoField.uint64("nbmq.counter", "Frame counter (nonce)", base.DEC),
  ciphertext   = ProtoField.bytes("nbmq.ciphertext", "Encrypted content"),
  tag          = ProtoField.bytes("nbmq.tag", "Authentication tag (Poly1305)"),
  handshake    = ProtoField.bytes("nbmq.handshake", "Noise IK handshake message"),
  bundle_count = ProtoField.uint8("nbmq.bundle.count", "Frames in the sealed bundle", base.DEC),
  bundle_length = ProtoField.uint16("nbmq.bundle.length", "Ciphertext length", base.DEC),
  ack_hash     = ProtoField.uint64("nbmq.ack_hash", "Acked frame hash (FNV-1a 64)", base.HEX),
  reassembled_in = ProtoField.framenum("nbmq.reassembled_in", "Message reassembled in frame", base.NONE),
  msg_id       = ProtoField.uint64("nbmq.message.id", "Message ID", base.HEX),
  msg_size     = ProtoField.uint32("nbmq.message.size", "Message size", base.DEC),
  msg_parts    = ProtoField.uint8("nbmq.message.part_count", "Part count", base.DEC),
  msg_frames   = ProtoField.string("nbmq.message.frames", "Frames"),
  msg_part_size = ProtoField.uint32("nbmq.message.part_size", "Part size", base.DEC),
  msg_part     = ProtoField.bytes("nbmq.message.part", "Part"),
}
nbmq.fields = f

-- One expert field per codec reason (nbmq.wire.FrameError order), plus secure mode's size rule
-- and the short Ack.
local REASONS = {
  truncated = "truncated header", version = "wrong version", kind = "unknown kind",
  too_large = "datagram over 500 bytes", sealed_too_large = "sealed frame over 524 bytes", part_count = "part_count is 0",
  part_index = "part_index >= part_count", part_size = "part larger than its message",
  chunk_size = "chunk_size disagrees with the bytes present", chunk_bounds = "chunk past its part",
}
local experts = {}
local expert_list = {}
for code, reason in pairs(REASONS) do
  experts[code] = ProtoExpert.new("nbmq.malformed." .. code, reason, expert.group.MALFORMED, expert.severity.ERROR)
  expert_list[#expert_list + 1] = experts[code]
end
-- A malformed bundle, in the words of the codec's bundle_layout (nbmq.wire.BUNDLE_ERROR_REASONS).
local BUNDLE_REASONS = {
  count = "secure bundle frame count out of range", truncated = "secure bundle truncated",
  header = "secure bundle holds a header that is not a sealed one", sessions = "secure bundle mixes sessions",
  lengths = "secure bundle lengths do not add up",
}
local bundle_experts = {}
for code, reason in pairs(BUNDLE_REASONS) do
  bundle_experts[code] = ProtoExpert.new("nbmq.malformed.bundle_" .. code, reason, expert.group.MALFORMED,
    expert.severity.ERROR)
  expert_list[#expert_list + 1] = bundle_experts[code]
end
local e_short_ack = ProtoExpert.new("nbmq.ack.short", "Ack payload is not 8 bytes", expert.group.MALFORMED, expert.severity.WARN)
expert_list[#expert_list + 1] = e_short_ack
nbmq.experts = expert_list

-- The codec's check_frame (nbmq/_codec_py/frames.py), rule for rule and in the same order:
-- nil when the datagram is a valid frame, else (code, offset of the field at fault). A secure
-- frame is checked as its plain frame would be, its counter and tag (SEAL) set aside; a
-- handshake frame carries no counter or tag.
local function check(tvb)
  local n = tvb:len()
  if n < 2 then return "truncated", n end
  local version = tvb(0, 1):uint()
  if version ~= VERSION and version ~= SECURE_VERSION then return "version", 0 end
  local kind = tvb(1, 1):uint()
  if kind > 5 then return "kind", 1 end
  local seal = (version == SECURE_VERSION and kind ~= 1 and kind ~= 2) and SEAL or 0
  if n > MAX_FRAME + seal then return seal > 0 and "sealed_too_large" or "too_large", MAX_FRAME + seal end
  n = n - seal
  if kind == 0 then
    if n < DATA_HEADER then return "truncated", n end
    local part_count, part_index = tvb(18, 1):uint(), tvb(19, 1):uint()
    local message_size, part_size = tvb(20, 4):uint(), tvb(24, 4):uint()
    local chunk_size, chunk_offset = tvb(28, 2):uint(), tvb(30, 4):uint()
    if part_count == 0 then return "part_count", 18 end
    if part_index >= part_count then return "part_index", 19 end
    if part_size > message_size then return "part_size", 24 end
    if chunk_size ~= n - DATA_HEADER then return "chunk_size", 28 end
    if chunk_offset + chunk_size > part_size then return "chunk_bounds", 30 end
    return nil
  end
  if n < CONTROL_HEADER then return "truncated", n end
  return nil
end

-- The codec's bundle_layout (nbmq/_codec_py/frames.py), rule for rule and in the same order:
-- the frames' entries ({head, size, len}) and the counter's offset, or nil, code, offset.
local function bundle_layout(tvb)
  local n = tvb:len()
  local count = n >= BUNDLE_HEAD and tvb(1, 1):uint() or 0
  if count < 2 then return nil, "count", 1 end
  local entries, pos, total, sid = {}, BUNDLE_HEAD, 0, nil
  for _ = 1, count do
    local head = pos + BUNDLE_ENTRY
    if head + CONTROL_HEADER > n then return nil, "truncated", n end
    local kind = tvb(head + 1, 1):uint()
    if tvb(head, 1):uint() ~= SECURE_VERSION or not (kind == 0 or (kind >= 3 and kind <= 5)) then
      return nil, "header", head
    end
    local size = kind == 0 and DATA_HEADER or CONTROL_HEADER
    if head + size > n then return nil, "truncated", n end
    local session = tvb(head + 2, 8):bytes():tohex()
    if sid == nil then sid = session elseif session ~= sid then return nil, "sessions", head + 2 end
    local len = tvb(pos, 2):uint()
    entries[#entries + 1] = { head = head, size = size, len = len, kind = kind }
    total = total + len
    pos = head + size
  end
  if n ~= pos + SEAL + total then return nil, "lengths", BUNDLE_HEAD end
  return entries, pos
end

-- Reassembly state, rebuilt on every (re)load of a capture: messages by key, and per frame
-- number the key of the message it belongs to.
local messages, frame_keys = {}, {}

function nbmq.init()
  messages, frame_keys = {}, {}
end

local function add_chunk(tvb, pinfo)
  local key = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port) .. "|" .. tvb(2, 8):bytes():tohex()
    .. "|" .. tvb(10, 8):bytes():tohex()
  frame_keys[pinfo.number] = key
  local m = messages[key]
  if m == nil then
    m = { parts = {}, message_size = tvb(20, 4):uint(), part_count = tvb(18, 1):uint(), done = nil, frames = {} }
    messages[key] = m
  end
  m.frames[#m.frames + 1] = pinfo.number
  if m.done ~= nil then return end
  local index, part_size = tvb(19, 1):uint(), tvb(24, 4):uint()
  local offset, size = tvb(30, 4):uint(), tvb(28, 2):uint()
  local part = m.parts[index]
  if part == nil then
    part = { size = part_size, chunks = {}, have = 0 }
    m.parts[index] = part
  end
  if part.size ~= part_size or part.chunks[offset] ~= nil then return end  -- a conflict or a repeat
  part.chunks[offset] = size > 0 and tvb(DATA_HEADER, size):bytes() or ByteArray.new()
  part.have = part.have + size
  local total = 0
  for _, p in pairs(m.parts) do
    if p.have ~= p.size then return end
    total = total + p.size
  end
  if total == m.message_size then m.done = pinfo.number end
end

-- The parts of a complete message, in order (absent parts empty), chunks laid at their offsets.
local function message_parts(m)
  local parts = {}
  for index = 0, m.part_count - 1 do
    local p, bytes = m.parts[index], ByteArray.new()
    if p ~= nil then
      local offsets = {}
      for off, _ in pairs(p.chunks) do offsets[#offsets + 1] = off end
      table.sort(offsets)
      for _, off in ipairs(offsets) do bytes:append(p.chunks[off]) end
    end
    parts[#parts + 1] = bytes
  end
  return parts
end

local function show_message(tvb, pinfo, t, key)
  local m = messages[key]
  if m == nil or m.done == nil then return end
  if m.done ~= pinfo.number then
    t:add(f.reassembled_in, m.done)
    return
  end
  local parts = message_parts(m)
  local whole = ByteArray.new()
  for _, p in ipairs(parts) do whole:append(p) end
  local msg_tvb = whole:tvb("Reassembled nbmq message")
  local mt = t:add(nbmq, msg_tvb(), string.format("Reassembled message: %d part(s), %d bytes, %d frame(s)",
    #parts, m.message_size, #m.frames))
  mt:add(f.msg_id, tvb(10, 8))
  mt:add(f.msg_size, m.message_size)
  mt:add(f.msg_parts, m.part_count)
  mt:add(f.msg_frames, table.concat(m.frames, ","))
  local at = 0
  for _, p in ipairs(parts) do
    mt:add(f.msg_part_size, p:len())
    if p:len() > 0 then mt:add(f.msg_part, msg_tvb(at, p:len())) end  -- an empty part has its size only
    at = at + p:len()
  end
end

local function add_if(t, field, tvb, offset, len)
  if tvb:len() >= offset + len then t:add(field, tvb(offset, len)) end
end

-- A data frame's header fields after its session id, its header starting at ``base``.
local function add_data_header(t, tvb, base)
  t:add(f.message_id, tvb(base + 10, 8)); t:add(f.part_count, tvb(base + 18, 1)); t:add(f.part_index, tvb(base + 19, 1))
  t:add(f.message_size, tvb(base + 20, 4)); t:add(f.part_size, tvb(base + 24, 4)); t:add(f.chunk_size, tvb(base + 28, 2))
  t:add(f.chunk_offset, tvb(base + 30, 4))
end

local function data_info(tvb, base, sid)
  return string.format("session=%s message=0x%s part %d/%d offset %d len %d", sid,
    tvb(base + 10, 8):bytes():tohex():lower(), tvb(base + 19, 1):uint() + 1, tvb(base + 18, 1):uint(),
    tvb(base + 30, 4):uint(), tvb(base + 28, 2):uint())
end

local function dissect_bundle(tvb, pinfo, tree)
  local n = tvb:len()
  pinfo.cols.protocol = "nbmq"
  local t = tree:add(nbmq, tvb(), "nbmq sealed bundle")
  t:add(f.version, tvb(0, 1))
  t:add(f.secure, true)
  add_if(t, f.bundle_count, tvb, 1, 1)
  local entries, stop, at = bundle_layout(tvb)
  if entries == nil then
    local text = string.format("%s (at byte %d)", BUNDLE_REASONS[stop], at)
    t:add_tvb_expert_info(bundle_experts[stop], at < n and tvb(at) or tvb(), text)
    pinfo.cols.info = "Malformed nbmq sealed bundle: " .. text
    return n
  end
  local cipher, whats = stop + COUNTER, {}
  local sid = string.format("0x%s", tvb(entries[1].head + 2, 8):bytes():tohex():lower())
  for i, e in ipairs(entries) do
    local ft = t:add(nbmq, tvb(e.head, e.size), string.format("Frame %d: %s (encrypted)", i, KINDS[e.kind]))
    ft:add(f.bundle_length, tvb(e.head - BUNDLE_ENTRY, BUNDLE_ENTRY))
    ft:add(f.version, tvb(e.head, 1)); ft:add(f.kind, tvb(e.head + 1, 1)); ft:add(f.session_id, tvb(e.head + 2, 8))
    if e.kind == 0 then add_data_header(ft, tvb, e.head) end
    if e.len > 0 then ft:add(f.ciphertext, tvb(cipher, e.len)) end
    cipher = cipher + e.len
    whats[#whats + 1] = KINDS[e.kind]
  end
  t:add(f.counter, tvb(stop, COUNTER))
  t:add(f.tag, tvb(n - TAG, TAG))
  pinfo.cols.info = string.format("Sealed bundle of %d frames (encrypted) session=%s: %s", #entries, sid,
    table.concat(whats, ", "))
  return n
end

local function dissect(tvb, pinfo, tree)
  local n = tvb:len()
  if n >= 1 and tvb(0, 1):uint() == BUNDLE_VERSION then return dissect_bundle(tvb, pinfo, tree) end
  pinfo.cols.protocol = "nbmq"
  local code, at = check(tvb)
  local kind = n >= 2 and tvb(1, 1):uint() or nil
  local t = tree:add(nbmq, tvb(), "nbmq " .. (KINDS[kind] or "frame"))
  add_if(t, f.version, tvb, 0, 1)
  add_if(t, f.kind, tvb, 1, 1)
  add_if(t, f.session_id, tvb, 2, 8)
  local sid = n >= 10 and string.format("0x%s", tvb(2, 8):bytes():tohex():lower()) or "?"
  local secure = n >= 1 and tvb(0, 1):uint() == SECURE_VERSION
  if secure then t:add(f.secure, true) end
  if code ~= nil then
    if kind == 0 and n <= MAX_FRAME + SEAL then
      add_if(t, f.message_id, tvb, 10, 8); add_if(t, f.part_count, tvb, 18, 1); add_if(t, f.part_index, tvb, 19, 1)
      add_if(t, f.message_size, tvb, 20, 4); add_if(t, f.part_size, tvb, 24, 4); add_if(t, f.chunk_size, tvb, 28, 2)
      add_if(t, f.chunk_offset, tvb, 30, 4)
    end
    local text = string.format("%s (at byte %d)", REASONS[code], at)
    local where = at < n and tvb(at) or tvb()
    t:add_tvb_expert_info(experts[code], where, text)
    pinfo.cols.info = string.format("Malformed nbmq %s: %s", KINDS[kind] or "frame", text)
    return n
  end
  if secure then
    local what = KINDS[kind]
    if kind == 1 or kind == 2 then
      if n > CONTROL_HEADER then t:add(f.handshake, tvb(CONTROL_HEADER)) end
      pinfo.cols.info = string.format("%s (secure handshake) session=%s", what, sid)
      return n
    end
    local head = kind == 0 and DATA_HEADER or CONTROL_HEADER
    if kind == 0 then add_data_header(t, tvb, 0) end
    t:add(f.counter, tvb(head, COUNTER))
    if n - head - SEAL > 0 then t:add(f.ciphertext, tvb(head + COUNTER, n - head - SEAL)) end
    t:add(f.tag, tvb(n - TAG, TAG))
    if kind == 0 then
      pinfo.cols.info = "Data (encrypted) " .. data_info(tvb, 0, sid)
    else
      pinfo.cols.info = string.format("%s (encrypted) session=%s", what, sid)
    end
    return n
  end
  if kind == 0 then
    add_data_header(t, tvb, 0)
    if n > DATA_HEADER then t:add(f.chunk, tvb(DATA_HEADER)) end
    if not pinfo.visited then add_chunk(tvb, pinfo) end
    local key = frame_keys[pinfo.number]
    if key ~= nil then show_message(tvb, pinfo, t, key) end
    pinfo.cols.info = "Data " .. data_info(tvb, 0, sid)
  else
    local rest = n - CONTROL_HEADER
    if rest > 0 then t:add(f.payload, tvb(CONTROL_HEADER)) end
    if kind == 5 then
      if rest == 8 then t:add(f.ack_hash, tvb(CONTROL_HEADER, 8)) else t:add_proto_expert_info(e_short_ack) end
    end
    pinfo.cols.info = string.format("%s session=%s", KINDS[kind], sid)
  end
  return n
end

-- Decode As: every datagram on the port is nbmq, malformed ones flagged.
function nbmq.dissector(tvb, pinfo, tree)
  return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
  local n = tvb:len()
  if n < CONTROL_HEADER then return false end
  local version = tvb(0, 1):uint()
  if version == BUNDLE_VERSION then  -- a bundle: its first entry holds a sealed header
    if n < BUNDLE_HEAD + BUNDLE_ENTRY + CONTROL_HEADER or tvb(BUNDLE_HEAD + BUNDLE_ENTRY, 1):uint() ~= SECURE_VERSION then
      return false
    end
  elseif tvb(1, 1):uint() > 5 or (version ~= VERSION and version ~= SECURE_VERSION) then
    return false
  end
  dissect(tvb, pinfo, tree)
  pinfo.conversation = nbmq
  return true
end

nbmq:register_heuristic("udp", heuristic)
DissectorTable.get("udp.port"):add_for_decode_as(nbmq)
