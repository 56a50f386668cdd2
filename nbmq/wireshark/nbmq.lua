-- nbmq over UDP (nbmq 0.2.0 wire format, seed 000): a heuristic dissector.
-- Shipped with the nbmq Python package; `nbmq wireshark install` copies it to the personal
-- Lua plugin folder. Every integer is big-endian.
--   DataFrame (kind 0):    version u8 | kind u8 | session_id u64 | message_id u64 | part_count u8
--                          | part_index u8 | message_size u32 | part_size u32 | chunk_size u16
--                          | chunk_offset u32 | chunk (chunk_size bytes, at most 466)
--   ControlFrame (1..5):   version u8 | kind u8 | session_id u64 | payload
-- A datagram is claimed when version is 1, kind is 0..5 and, for data frames, the lengths are
-- consistent (the codec's own checks), so other UDP traffic is left alone. Filters:
--   nbmq.session_id == 0x..., nbmq.kind == 5, nbmq.message_id, nbmq.ack_hash, ...

local nbmq = Proto("nbmq", "nbmq messaging (UDP)")

local KINDS = { [0] = "Data", [1] = "Connect", [2] = "Connected", [3] = "Disconnected",
                [4] = "Heartbeat", [5] = "Ack" }
local DATA_HEADER, CONTROL_HEADER, MAX_FRAME, MAX_CHUNK = 34, 10, 500, 466

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
  ack_hash     = ProtoField.uint64("nbmq.ack_hash", "Acked frame hash (FNV-1a 64)", base.HEX),
}
nbmq.fields = f

local e_short_ack = ProtoExpert.new("nbmq.ack.short", "Ack payload is not 8 bytes", expert.group.MALFORMED, expert.severity.WARN)
nbmq.experts = { e_short_ack }

-- The codec's checks (nbmq.wire.FrameError): true when the datagram is an nbmq frame.
local function looks_like_nbmq(tvb)
  local len = tvb:len()
  if len < CONTROL_HEADER or len > MAX_FRAME then return false end
  if tvb(0, 1):uint() ~= 1 then return false end
  local kind = tvb(1, 1):uint()
  if kind > 5 then return false end
  if kind ~= 0 then return true end
  if len < DATA_HEADER then return false end
  local part_count, part_index = tvb(18, 1):uint(), tvb(19, 1):uint()
  local message_size, part_size = tvb(20, 4):uint(), tvb(24, 4):uint()
  local chunk_size, chunk_offset = tvb(28, 2):uint(), tvb(30, 4):uint()
  return part_count > 0 and part_index < part_count and part_size <= message_size
     and chunk_size == len - DATA_HEADER and chunk_size <= MAX_CHUNK
     and chunk_offset + chunk_size <= part_size
end

local function dissect(tvb, pinfo, tree)
  local kind = tvb(1, 1):uint()
  pinfo.cols.protocol = "nbmq"
  local t = tree:add(nbmq, tvb(), "nbmq " .. KINDS[kind])
  t:add(f.version, tvb(0, 1))
  t:add(f.kind, tvb(1, 1))
  t:add(f.session_id, tvb(2, 8))
  local sid = string.format("0x%s", tvb(2, 8):bytes():tohex():lower())
  if kind == 0 then
    t:add(f.message_id, tvb(10, 8))
    t:add(f.part_count, tvb(18, 1))
    t:add(f.part_index, tvb(19, 1))
    t:add(f.message_size, tvb(20, 4))
    t:add(f.part_size, tvb(24, 4))
    t:add(f.chunk_size, tvb(28, 2))
    t:add(f.chunk_offset, tvb(30, 4))
    if tvb:len() > DATA_HEADER then t:add(f.chunk, tvb(DATA_HEADER)) end
    pinfo.cols.info = string.format("Data session=%s message=0x%s part %d/%d offset %d len %d", sid,
      tvb(10, 8):bytes():tohex():lower(), tvb(19, 1):uint() + 1, tvb(18, 1):uint(), tvb(30, 4):uint(), tvb(28, 2):uint())
  else
    local rest = tvb:len() - CONTROL_HEADER
    if rest > 0 then t:add(f.payload, tvb(CONTROL_HEADER)) end
    if kind == 5 then
      if rest == 8 then t:add(f.ack_hash, tvb(CONTROL_HEADER, 8)) else t:add_proto_expert_info(e_short_ack) end
    end
    pinfo.cols.info = string.format("%s session=%s", KINDS[kind], sid)
  end
  return tvb:len()
end

function nbmq.dissector(tvb, pinfo, tree)
  if not looks_like_nbmq(tvb) then return 0 end
  return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
  if not looks_like_nbmq(tvb) then return false end
  dissect(tvb, pinfo, tree)
  pinfo.conversation = nbmq
  return true
end

nbmq:register_heuristic("udp", heuristic)
DissectorTable.get("udp.port"):add_for_decode_as(nbmq)
