// SchemaDecode reads Confluent-framed Kafka record values and prints each as
// JSON, decoded with the reference Java libraries: Apache Avro
// (GenericDatumReader, the schema fetched from the registry by its id) and
// protobuf-java (DynamicMessage, printed with JsonFormat). It shares no code
// with the relay: it is the outside check of issue 48's record formats.
//
// Run as a source-file program (Java 17+), with the jars of
// scripts/schemacheck.sh on the class path:
//
//   java -cp "$(scripts/schemacheck.sh classpath)" interop/schemas/SchemaDecode.java \
//       REGISTRY_URL [DESCRIPTOR_SET_FILE] < values.hex > values.jsonl
//
// REGISTRY_URL is the Confluent-compatible API (Apicurio's /apis/ccompat/v7).
// Each input line is one record value in hex; each output line is its JSON, or
// "ERROR <message>" for a value that does not decode (the check fails on it).
// DESCRIPTOR_SET_FILE is a serialized FileDescriptorSet holding the .proto
// schemas' files (protobuf-java cannot parse .proto text); the message is found
// there by the value's message-index path in the file whose name ends in the
// registered schema's package and first message, checked against the
// registry's text.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.google.protobuf.DescriptorProtos;
import com.google.protobuf.Descriptors;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.util.JsonFormat;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.DecoderFactory;

public class SchemaDecode {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newHttpClient();
    static String registry;
    static final Map<Integer, JsonNode> schemas = new HashMap<>();
    static final List<Descriptors.FileDescriptor> files = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: SchemaDecode REGISTRY_URL [DESCRIPTOR_SET_FILE] < hex lines");
            System.exit(2);
        }
        registry = args[0].replaceAll("/+$", "");
        if (args.length > 1) {
            loadDescriptors(Path.of(args[1]));
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            try {
                System.out.println(decode(HexFormat.of().parseHex(line.trim())));
            } catch (Exception e) {
                System.out.println("ERROR " + e.toString().replace('\n', ' '));
            }
        }
    }

    static String decode(byte[] value) throws Exception {
        ByteBuffer b = ByteBuffer.wrap(value);
        if (value.length < 5 || b.get() != 0) {
            throw new IllegalArgumentException("not a Confluent-framed value");
        }
        int id = b.getInt();
        JsonNode s = schema(id);
        String type = s.has("schemaType") ? s.get("schemaType").asText() : "AVRO";
        byte[] body = new byte[b.remaining()];
        switch (type) {
            case "AVRO": {
                b.get(body);
                Schema schema = new Schema.Parser().parse(s.get("schema").asText());
                GenericDatumReader<Object> r = new GenericDatumReader<>(schema);
                var dec = DecoderFactory.get().binaryDecoder(body, null);
                Object v = r.read(null, dec);
                if (!dec.isEnd()) {
                    throw new IllegalArgumentException("bytes after the Avro value");
                }
                return GenericData.get().toString(v);
            }
            case "PROTOBUF": {
                List<Integer> path = messageIndexes(b);
                b.get(body = new byte[b.remaining()]);
                Descriptors.Descriptor d = message(s.get("schema").asText(), path);
                DynamicMessage m = DynamicMessage.parseFrom(d, body);
                return JsonFormat.printer().preservingProtoFieldNames().omittingInsignificantWhitespace().print(m);
            }
            case "JSON": {
                b.get(body);
                return JSON.writeValueAsString(JSON.readTree(body));
            }
        }
        throw new IllegalArgumentException("schema type " + type);
    }

    static JsonNode schema(int id) throws Exception {
        JsonNode s = schemas.get(id);
        if (s != null) {
            return s;
        }
        HttpRequest req = HttpRequest.newBuilder(URI.create(registry + "/schemas/ids/" + id)).GET().build();
        HttpResponse<String> resp = HTTP.send(req, HttpResponse.BodyHandlers.ofString());
        if (resp.statusCode() != 200) {
            throw new IllegalStateException("registry: schema " + id + ": HTTP " + resp.statusCode() + ": " + resp.body());
        }
        s = JSON.readTree(resp.body());
        schemas.put(id, s);
        return s;
    }

    // messageIndexes reads Confluent's message-index list: a zig-zag varint
    // count, then the indexes; a count of 0 is [0].
    static List<Integer> messageIndexes(ByteBuffer b) {
        int n = zigzag(b);
        List<Integer> out = new ArrayList<>();
        if (n == 0) {
            out.add(0);
            return out;
        }
        for (int i = 0; i < n; i++) {
            out.add(zigzag(b));
        }
        return out;
    }

    static int zigzag(ByteBuffer b) {
        long raw = 0;
        int shift = 0;
        while (true) {
            byte x = b.get();
            raw |= (long) (x & 0x7f) << shift;
            if ((x & 0x80) == 0) {
                break;
            }
            shift += 7;
        }
        return (int) ((raw >>> 1) ^ -(raw & 1));
    }

    static void loadDescriptors(Path p) throws Exception {
        var set = DescriptorProtos.FileDescriptorSet.parseFrom(Files.readAllBytes(p));
        Map<String, Descriptors.FileDescriptor> built = new HashMap<>();
        for (var fp : set.getFileList()) {
            var deps = new ArrayList<Descriptors.FileDescriptor>();
            for (String dep : fp.getDependencyList()) {
                var d = built.get(dep);
                if (d == null) {
                    throw new IllegalStateException(fp.getName() + " imports " + dep + ", which comes later in the set");
                }
                deps.add(d);
            }
            var fd = Descriptors.FileDescriptor.buildFrom(fp, deps.toArray(new Descriptors.FileDescriptor[0]));
            built.put(fp.getName(), fd);
            files.add(fd);
        }
    }

    // message finds the message at path in the file of the descriptor set
    // whose package and first message the registered text declares.
    static Descriptors.Descriptor message(String text, List<Integer> path) {
        for (var f : files) {
            if (f.getMessageTypes().isEmpty()) {
                continue;
            }
            String first = f.getMessageTypes().get(0).getName();
            boolean pkg = f.getPackage().isEmpty() || text.contains("package " + f.getPackage() + ";");
            if (!pkg || !text.contains("message " + first)) {
                continue;
            }
            List<Descriptors.Descriptor> ms = f.getMessageTypes();
            Descriptors.Descriptor d = null;
            for (int i : path) {
                d = ms.get(i);
                ms = d.getNestedTypes();
            }
            return d;
        }
        throw new IllegalStateException("no file of the descriptor set matches the registered schema");
    }
}
