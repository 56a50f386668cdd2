-- rqueue over TCP (seed 004), port 6567 by default: a 3-byte preamble (payload length u16
-- big-endian, type u8), then the payload. SUBSCRIBE (1) and REMOVE (2) carry a topic;
-- DEREGISTER (5) nothing; NOTIFICATION (7) topic_len u8, the topic, then the content.
-- Messages split over TCP segments are reassembled with dissect_tcp_pdus.
-- Filters: rqueue.type, rqueue.topic, rqueue.length, rqueue.content_length, rqueue.content.

local rqueue = Proto("rqueue", "rqueue pub/sub (TCP)")
local PREAMBLE = 3
local TYPES = { [1] = "SUBSCRIBE", [2] = "REMOVE", [5] = "DEREGISTER", [7] = "NOTIFICATION" }

local f = {
  length         = ProtoField.uint16("rqueue.length", "Payload length", base.DEC),
  type           = ProtoField.uint8("rqueue.type", "Type", base.DEC, TYPES),
  topic_len      = ProtoField.uint8("rqueue.topic_len", "Topic length", base.DEC),
  topic          = ProtoField.string("rqueue.topic", "Topic"),
  content_length = ProtoField.uint32("rqueue.content_length", "Content length", base.DEC),
  content        = ProtoField.bytes("rqueue.content", "Content"),
}
rqueue.fields = f
rqueue.prefs.tcp_port = Pref.uint("TCP port", 6567, "TCP port of the rqueue server")

local e_topic = ProtoExpert.new("rqueue.topic_len.bad", "topic_len past the payload", expert.group.MALFORMED, expert.severity.ERROR)
local e_type = ProtoExpert.new("rqueue.type.unknown", "unknown message type", expert.group.MALFORMED, expert.severity.ERROR)
rqueue.experts = { e_topic, e_type }

local function pdu_length(tvb, pinfo, offset)
  return PREAMBLE + tvb(offset, 2):uint()
end

local function dissect_pdu(tvb, pinfo, tree)
  pinfo.cols.protocol = "rqueue"
  local size, kind = tvb(0, 2):uint(), tvb(2, 1):uint()
  local name = TYPES[kind] or string.format("type %d", kind)
  local t = tree:add(rqueue, tvb(), "rqueue " .. name)
  t:add(f.length, tvb(0, 2))
  local ti = t:add(f.type, tvb(2, 1))
  local topic = ""
  if kind == 1 or kind == 2 then
    if size > 0 then t:add(f.topic, tvb(PREAMBLE, size)); topic = tvb(PREAMBLE, size):string() end
    t:add(f.content_length, 0):set_generated()
  elseif kind == 7 then
    local topic_len = size > 0 and tvb(PREAMBLE, 1):uint() or 0
    if size == 0 or 1 + topic_len > size then
      t:add_proto_expert_info(e_topic)
    else
      t:add(f.topic_len, tvb(PREAMBLE, 1))
      if topic_len > 0 then t:add(f.topic, tvb(PREAMBLE + 1, topic_len)); topic = tvb(PREAMBLE + 1, topic_len):string() end
      local rest = size - 1 - topic_len
      t:add(f.content_length, rest):set_generated()
      if rest > 0 then t:add(f.content, tvb(PREAMBLE + 1 + topic_len, rest)) end
    end
  elseif kind == 5 then
    t:add(f.topic, ""):set_generated()  -- present (empty) so multi-PDU field columns stay aligned
    t:add(f.content_length, 0):set_generated()
  else
    ti:add_proto_expert_info(e_type)
  end
  pinfo.cols.info:append(string.format("[%s %s] ", name, topic))
  return tvb:len()
end

function rqueue.dissector(tvb, pinfo, tree)
  pinfo.cols.info = ""
  dissect_tcp_pdus(tvb, tree, PREAMBLE, pdu_length, dissect_pdu, true)
  return tvb:len()
end

local registered = 0
function rqueue.prefs_changed()
  local tcp = DissectorTable.get("tcp.port")
  if registered ~= 0 then tcp:remove(registered, rqueue) end
  registered = rqueue.prefs.tcp_port
  if registered ~= 0 then tcp:add(registered, rqueue) end
end

registered = rqueue.prefs.tcp_port
DissectorTable.get("tcp.port"):add(registered, rqueue)
